// SPDX-License-Identifier: Apache-2.0
//! @file
//! gradcodec encode: an array (.npy or raw) -> a .gcdc file (frame + shape trailer).
#include <array>
#include <iostream>

#include "codec_calls.hpp"
#include "commands.hpp"
#include "error.hpp"
#include "gcdc_file.hpp"
#include "input.hpp"
#include "text.hpp"

namespace gradcodec::tool {
namespace {

constexpr std::array encode_options{
    option_spec{
        "codec", "SPEC",
        "codec spec, e.g. topk:ratio=0.01 or qsgd:levels=7,bucket=512 (see 'gradcodec list')", true,
        false},
    option_spec{"seed", "S", "context seed: keys every random decision (default 0)", false, false},
    option_spec{"step", "T", "context training step (default 0)", false, false},
    option_spec{"tensor-id", "I", "context tensor id (default 0)", false, false},
    backend_option,
    option_spec{"dtype", "D", "read the input as raw little-endian values: f32 (or f16), shape [n]",
                false, false},
    option_spec{"rows", "R",
                "matrix rows given to the codec (PowerSGD views the array as R x n/R); default "
                "shape[0] when ndim >= 2, else 0 (a vector)",
                false, false},
};

}  // namespace

const command_spec encode_spec{
    "encode",
    "Encodes an .npy array (or a raw file) into a .gcdc frame file.",
    "in.npy out.gcdc",
    "Encodes an array (.npy float32/float16, any shape, C order; or a raw file with --dtype)\n"
    "into a .gcdc file: the frame exactly as gradcodec::encode wrote it, then the shape.",
    "examples:\n"
    "  gradcodec encode --codec topk:ratio=0.01 grad.npy grad.gcdc\n"
    "  gradcodec encode --codec qsgd:levels=7,bucket=512 --seed 42 --step 100 grad.npy g.gcdc\n"
    "  gradcodec encode --codec powersgd:rank=2 --dtype f32 --rows 256 grad.f32 grad.gcdc\n",
    encode_options,
    2};

int run_encode(const parsed_args& args) {
  const codec_spec spec = spec_from_text("--codec", *args.get("codec"));
  const context ctx{args.get_u64("seed", 0), args.get_u64("step", 0), args.get_u64("tensor-id", 0)};
  const bool rows_given = args.has("rows");
  const std::uint64_t rows = args.get_u64("rows", 0);
  const exec_options opt = exec_from_args(args);
  const std::string& in_path = args.operands[0];
  const std::string& out_path = args.operands[1];

  const array x = load_input(in_path, args.get("dtype"));
  const_tensor_view v = x.view();
  if (rows_given) {
    if (rows > 0 && v.n % rows != 0)
      fail("--rows " + std::to_string(rows) + " does not divide the " + std::to_string(v.n) +
           " elements of '" + in_path + "'");
    v.rows = rows;
  }
  const auto frame = encode_tensor(spec, ctx, v, opt);
  write_gcdc(out_path, frame, x.shape);

  const std::uint64_t in_bytes = v.n * dtype_size(v.type);
  std::cout << in_path << " " << shape_string(x.shape) << " " << dtype_name(v.type) << " -> "
            << out_path << ": " << to_string(spec) << ", " << frame.size() << " frame bytes, "
            << bits_per_element(frame.size(), v.n) << " bits/element, ratio "
            << compression_ratio(in_bytes, frame.size()) << "\n";
  return 0;
}

}  // namespace gradcodec::tool
