// SPDX-License-Identifier: Apache-2.0
//! @file
//! Damaged copies of a good frame, each with the verdict decode_expected must give for it
//! against the good frame's header: the host tests and the GPU tests check the same list.
#pragma once

#include <cstring>
#include <string>
#include <vector>

#include "gradcodec/blocks/expected_header.hpp"
#include "gradcodec/blocks/layout.hpp"
#include "gradcodec/expected_decode.hpp"
#include "gradcodec/frame.hpp"

namespace gradcodec::test {

//! Codecs whose frames (of 4097 elements, 17 rows) the damage tests break: the sparse ones
//! with fixed and varying counts, a quantizer, random-k, a cast and PowerSGD.
inline const char* const kDamagedSpecs[] = {
    "topk:ratio=0.05", "threshold:tau=0.5", "dgc:ratio=0.05", "qsgd", "randomk:ratio=0.1", "fp16",
    "powersgd:rank=2"};

struct damaged_frame {
  std::string what;
  std::vector<std::byte> bytes;
  verdict_code want;
  std::uint32_t field = 0;  //!< for unexpected_field
};

inline std::vector<damaged_frame> damaged_frames(const std::vector<std::byte>& frame) {
  const frame_header h = peek(frame).value();
  std::vector<damaged_frame> out;
  auto with_header = [&](const char* what, frame_header changed, verdict_code want,
                         std::uint32_t field) {
    auto bytes = frame;
    write_header(changed, bytes.data());
    out.push_back({what, bytes, want, field});
  };
  out.push_back({"truncated", {frame.begin(), frame.begin() + 20}, verdict_code::truncated});
  auto bytes = frame;
  bytes[0] = std::byte{'X'};
  out.push_back({"magic", bytes, verdict_code::bad_magic});
  bytes = frame;
  bytes[4] = std::byte{2};
  out.push_back({"version", bytes, verdict_code::unsupported_version});
  bytes = frame;
  bytes[9] ^= std::byte{1};  // n, without fixing the checksum
  out.push_back({"checksum", bytes, verdict_code::header_checksum});
  out.push_back(
      {"shorter frame", {frame.begin(), frame.end() - 16}, verdict_code::size_mismatch, 16});
  if (!blocks::traits_of(h.codec)
           .count_from_data) {  // threshold and dgc frames may sit in a longer buffer
    bytes = frame;
    bytes.resize(bytes.size() + 16);
    out.push_back({"longer frame", bytes, verdict_code::size_mismatch, 16});
  }

  frame_header c = h;
  c.n = h.n + 1;
  with_header("n", c, verdict_code::unexpected_field, 8);
  c = h;
  c.type = h.type == dtype::bf16 ? dtype::f16 : dtype::bf16;
  with_header("dtype", c, verdict_code::unexpected_field, 6);
  c = h;
  c.codec = h.codec == codec_id::qsgd ? codec_id::terngrad : codec_id::qsgd;
  with_header("codec", c, verdict_code::unexpected_field, 5);

  const bool sparse =
      h.codec == codec_id::topk || h.codec == codec_id::threshold || h.codec == codec_id::dgc;
  if (sparse && h.count > 1 && (h.flags & flag_index64) == 0) {
    const auto l = blocks::sparse_layout_of(h.count, dtype_size(h.type), false);
    for (std::uint32_t index : {static_cast<std::uint32_t>(h.n), 0u}) {  // out of range, unordered
      bytes = frame;
      std::memcpy(bytes.data() + header_bytes + l.index_offset + 4, &index, 4);
      out.push_back({index == 0 ? "unordered index" : "index out of range", bytes,
                     verdict_code::bad_indices});
    }
  }
  if (h.codec == codec_id::threshold || h.codec == codec_id::dgc) {
    c = h;
    c.count = h.n + 1;  // above n
    with_header("count above n", c, verdict_code::bad_count, 24);
    c = h;
    c.count = h.count + 8;  // more values than the payload size holds
    with_header("count and size", c, verdict_code::bad_count, 24);
  }
  return out;
}

//! The frame followed by 32 more bytes: decode_expected accepts it for threshold and dgc.
inline std::vector<std::byte> in_longer_buffer(const std::vector<std::byte>& frame) {
  auto bytes = frame;
  bytes.resize(bytes.size() + 32, std::byte{0x5A});
  return bytes;
}

//! The frame with its non-finite flag set: decode_expected accepts it.
inline std::vector<std::byte> flagged_nonfinite(const std::vector<std::byte>& frame) {
  frame_header h = peek(frame).value();
  h.flags |= flag_nonfinite;
  auto bytes = frame;
  write_header(h, bytes.data());
  return bytes;
}

}  // namespace gradcodec::test
