// SPDX-License-Identifier: Apache-2.0
//! @file
//! The header check of decode_expected (gradcodec/expected_decode.hpp), written once for
//! host and device: the host backends run it before decoding, the CUDA backend runs it in
//! a one-thread kernel, so both give the same verdict for the same bytes. A fused kernel
//! that receives frames can run it too.
#pragma once

#include <cstdint>

#include "gradcodec/blocks/codec_traits.hpp"
#include "gradcodec/blocks/config.hpp"
#include "gradcodec/blocks/header.hpp"
#include "gradcodec/blocks/layout.hpp"
#include "gradcodec/format.hpp"

namespace gradcodec::blocks {

//! Little-endian `bytes`-byte value at src (any alignment).
GRADCODEC_HD std::uint64_t get_le(const std::uint8_t* src, int bytes) {
  std::uint64_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) v = (v << 8) | src[i];
  return v;
}

GRADCODEC_HD frame_verdict failed_verdict(verdict_code c, std::uint32_t field) {
  frame_verdict v{};
  v.code = static_cast<std::uint32_t>(c);
  v.field = field;
  return v;
}

//! The verdict on the first `frame_bytes` bytes at `frame` against `expected`, a header
//! the host already checked with peek's rules. Reads at most the 48 header bytes.
GRADCODEC_HD frame_verdict check_expected_header(const frame_header& expected,
                                                 const std::uint8_t* frame,
                                                 std::uint64_t frame_bytes) {
  if (frame_bytes < header_bytes) return failed_verdict(verdict_code::truncated, 0);
  if (get_le(frame, 4) != frame_magic) return failed_verdict(verdict_code::bad_magic, 0);
  if (frame[4] != format_version) return failed_verdict(verdict_code::unsupported_version, 4);
  if (get_le(frame + 44, 4) != crc32c_bitwise(frame, 44))
    return failed_verdict(verdict_code::header_checksum, 44);

  // Byte by byte against the expected header, the payload size last (it follows from the
  // other fields, which name the cause better); the fields that may vary are skipped here
  // and checked for consistency below. The field named is the one the byte belongs to.
  std::uint8_t want[header_bytes];
  serialize_header(expected, want);
  const bool varies = traits_of(expected.codec).count_from_data;
  constexpr std::uint8_t field_start[] = {5, 6, 7, 8, 16, 24, 32, 36, 38, 39, 40};
  for (int pass = 0; pass < 2; ++pass) {
    std::uint32_t field = 5;
    for (std::uint32_t i = 5; i < 44; ++i) {
      for (std::uint8_t s : field_start)
        if (s == i) field = s;
      const bool payload_size = field == 16;
      if (payload_size != (pass == 1) || (varies && (field == 16 || field == 24))) continue;
      const std::uint8_t mask = i == 7 ? static_cast<std::uint8_t>(~flag_nonfinite) : 0xFFu;
      if ((frame[i] & mask) != (want[i] & mask))
        return failed_verdict(verdict_code::unexpected_field, field);
    }
  }

  const std::uint64_t count = get_le(frame + 24, 8);
  const std::uint64_t payload = get_le(frame + 16, 8);
  if (varies) {
    const std::uint64_t value_size = expected.type == dtype::f32 ? 4 : 2;
    const bool index64 = (expected.flags & flag_index64) != 0;
    if (count > expected.n || (count == 0 && expected.n > 0 && expected.codec == codec_id::dgc) ||
        sparse_layout_of(count, value_size, index64).total != payload)
      return failed_verdict(verdict_code::bad_count, 24);
  }
  // threshold and dgc frames may sit in a longer buffer (their capacity, e.g. a padded
  // receive slot or a graph captured for the largest frame); the others fill it exactly.
  if (varies ? frame_bytes - header_bytes < payload : frame_bytes - header_bytes != payload)
    return failed_verdict(verdict_code::size_mismatch, 16);
  frame_verdict v{};
  v.count = count;
  return v;
}

}  // namespace gradcodec::blocks
