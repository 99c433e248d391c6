// SPDX-License-Identifier: Apache-2.0
//! @file
//! gradcodec inspect: every header field by name, the codec spec, the shape and the sizes.
#include <array>
#include <cstring>
#include <iostream>
#include <vector>

#include "array.hpp"
#include "codec_calls.hpp"
#include "commands.hpp"
#include "gcdc_file.hpp"
#include "gradcodec/blocks/block_scaled.hpp"
#include "gradcodec/blocks/codec_traits.hpp"
#include "text.hpp"

namespace gradcodec::tool {
namespace {

constexpr std::array inspect_options{
    backend_option,
    option_spec{"verify", "", "also decode the payload (with --backend) to check it", false, false},
};

//! What a header field means for this codec, or "unused".
std::string count_meaning(codec_id c) {
  if (blocks::traits_of(c).selects) return "items sent";
  if (blocks::traits_of(c).matrix) return "rows";
  return "unused";
}

std::string group_meaning(codec_id c) {
  if (c == codec_id::fp8row) return "row length";
  if (blocks::block_scaled(c)) return "block";
  if (blocks::traits_of(c).bucketed) return "bucket";
  if (blocks::traits_of(c).matrix) return "rank, 0 = sent dense";
  return "unused";
}

std::string level_meaning(codec_id c) {
  if (c == codec_id::qsgd) return "levels";
  if (c == codec_id::minmax) return "bits";
  if (blocks::block_scaled(c))
    return "element format (1 e4m3, 2 e5m2, 3 e3m2, 4 e2m3, 5 e2m1, 6 int8)";
  return "unused";
}

std::string param_meaning(codec_id c) {
  switch (c) {
    case codec_id::threshold: return "tau";
    case codec_id::dgc: return "sample";
    case codec_id::terngrad: return "clip";
    case codec_id::powersgd: return "eps";
    default: return "unused";
  }
}

std::string flag_names(std::uint8_t flags) {
  std::string s;
  if (flags & flag_nonfinite) s += "nonfinite";
  if (flags & flag_index64) s += std::string(s.empty() ? "" : ",") + "index64";
  return s.empty() ? "none" : s;
}

std::string mode_names(codec_id c, std::uint8_t mode) {
  std::string s;
  const auto add = [&](const std::string& name) { s += (s.empty() ? "" : ",") + name; };
  if (blocks::traits_of(c).rounds) add(mode & mode_stochastic ? "stochastic" : "nearest");
  if (blocks::traits_of(c).block_scaled) add(mode & mode_rotate ? "rotated" : "not rotated");
  if (c == codec_id::qsgd) add(mode & mode_norm_max ? "norm_max" : "norm_l2");
  if (c == codec_id::sign) {
    const auto k = (mode & mode_scale_mask) >> mode_scale_shift;
    add(std::string("scale=") + (k == 0 ? "none" : k == 1 ? "mean" : "l2"));
  }
  if (c == codec_id::randomk) add(mode & mode_unbiased ? "unbiased" : "biased");
  return s.empty() ? "none" : s;
}

}  // namespace

const command_spec inspect_spec{
    "inspect",
    "in.gcdc",
    "Prints every header field of a .gcdc file by name, the codec spec reconstructed from\n"
    "the header, the shape, the frame and payload sizes, bits per element and the\n"
    "compression ratio against the input dtype.",
    "example:\n"
    "  gradcodec inspect grad.gcdc\n",
    inspect_options,
    1};

int run_inspect(const parsed_args& args) {
  const exec_options opt = exec_from_args(args);
  const std::string& path = args.operands[0];
  const gcdc_file f = read_gcdc(path);
  const frame_header& h = f.header;
  std::uint32_t check = 0;
  std::memcpy(&check, f.bytes.data() + 44, 4);
  const std::uint64_t input_bytes = h.n * dtype_size(h.type);

  std::vector<std::pair<std::string, std::string>> rows{
      {"file", path + " (" + std::to_string(f.bytes.size()) + " bytes)"},
      {"magic", "GCDC"},
      {"version", std::to_string(h.version)},
      {"codec", std::string(codec_name(h.codec)) + " (id " +
                    std::to_string(static_cast<int>(h.codec)) + ")"},
      {"spec", to_string(spec_of(h))},
      {"dtype",
       std::string(dtype_name(h.type)) + " (" + std::to_string(static_cast<int>(h.type)) + ")"},
      {"flags", strprintf("0x%02x (%s)", h.flags, flag_names(h.flags).c_str())},
      {"n", std::to_string(h.n)},
      {"payload_bytes", std::to_string(h.payload_bytes)},
      {"count", std::to_string(h.count) + " (" + count_meaning(h.codec) + ")"},
      {"group", std::to_string(h.group) + " (" + group_meaning(h.codec) + ")"},
      {"level", std::to_string(h.level) + " (" + level_meaning(h.codec) + ")"},
      {"mode", strprintf("0x%02x (%s)", h.mode, mode_names(h.codec, h.mode).c_str())},
      {"param",
       strprintf("%.9g (%s)", static_cast<double>(h.param), param_meaning(h.codec).c_str())},
      {"check", strprintf("0x%08x (CRC-32C of header bytes 0..43)", check)},
      {"shape", shape_string(f.shape) + (f.has_trailer ? "" : " (no shape trailer: 1-D)")},
      {"frame_bytes", std::to_string(h.frame_bytes())},
      {"input_bytes", std::to_string(input_bytes) + " (" + std::string(dtype_name(h.type)) + ")"},
      {"bits_per_element", bits_per_element(h.frame_bytes(), h.n) + " (frame, header included)"},
      {"compression_ratio", compression_ratio(input_bytes, h.frame_bytes())},
  };
  if (args.has("verify")) {
    std::vector<float> out(h.n);
    decode_frame(f.frame(), h, tensor_view{out.data(), h.n, dtype::f32, 0}, opt);
    rows.emplace_back("verify", "ok (decoded)");
  }
  for (const auto& [key, value] : rows) std::cout << pad(key, 18) << " " << value << "\n";
  return 0;
}

}  // namespace gradcodec::tool
