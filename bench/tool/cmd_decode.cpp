// SPDX-License-Identifier: Apache-2.0
//! @file
//! gradcodec decode: a .gcdc file -> a .npy array of the original shape and dtype.
#include <array>
#include <iostream>

#include "codec_calls.hpp"
#include "commands.hpp"
#include "gcdc_file.hpp"
#include "npy.hpp"

namespace gradcodec::tool {
namespace {

constexpr std::array decode_options{backend_option};

}  // namespace

const command_spec decode_spec{
    "decode",
    "Decodes a .gcdc file into a .npy array.",
    "in.gcdc out.npy",
    "Decodes a .gcdc file into a .npy array with the shape of its trailer (1-D without one)\n"
    "and the frame's dtype: float32 or float16 (a bfloat16 frame decodes to float32).",
    "example:\n"
    "  gradcodec decode grad.gcdc grad_hat.npy\n",
    decode_options,
    2};

int run_decode(const parsed_args& args) {
  const exec_options opt = exec_from_args(args);
  const std::string& in_path = args.operands[0];
  const std::string& out_path = args.operands[1];

  const gcdc_file f = read_gcdc(in_path);
  // NumPy has no bfloat16: widen it (exactly) to float32.
  const dtype out_type = f.header.type == dtype::bf16 ? dtype::f32 : f.header.type;
  array y = array::zeros(out_type, f.shape);
  decode_frame(f.frame(), f.header, y.mutable_view(), opt);
  write_npy(out_path, y);

  std::cout << in_path << " -> " << out_path << ": " << to_string(spec_of(f.header)) << ", "
            << shape_string(y.shape) << " " << dtype_name(out_type) << "\n";
  return 0;
}

}  // namespace gradcodec::tool
