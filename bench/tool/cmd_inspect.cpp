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
#include "gradcodec/frame.hpp"
#include "gradcodec/spec.hpp"
#include "text.hpp"

namespace gradcodec::tool {
namespace {

constexpr std::array inspect_options{
    backend_option,
    option_spec{"verify", "", "also decode the payload (with --backend) to check it", false, false},
};

//! What a header field means for this codec, or "unused".
std::string meaning(std::string_view field) {
  return field.empty() ? "unused" : std::string(field);
}

std::string flag_names(std::uint8_t flags) {
  std::string s;
  if (flags & flag_nonfinite) s += "nonfinite";
  if (flags & flag_index64) s += std::string(s.empty() ? "" : ",") + "index64";
  return s.empty() ? "none" : s;
}

}  // namespace

const command_spec inspect_spec{
    "inspect",
    "Prints a .gcdc file's header fields, codec spec, sizes and ratio.",
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
      {"count", std::to_string(h.count) + " (" + meaning(info(h.codec).header.count) + ")"},
      {"group", std::to_string(h.group) + " (" + meaning(info(h.codec).header.group) + ")"},
      {"level", std::to_string(h.level) + " (" + meaning(info(h.codec).header.level) + ")"},
      {"mode", strprintf("0x%02x (%s)", h.mode, describe_mode(h.codec, h.mode).c_str())},
      {"param", strprintf("%.9g (%s)", static_cast<double>(h.param),
                          meaning(info(h.codec).header.param).c_str())},
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
