// SPDX-License-Identifier: Apache-2.0
//! @file
//! The frame: a 48-byte little-endian header followed by the codec's payload.
//! docs/format.md specifies it byte by byte.
#pragma once

#include <cstddef>
#include <cstdint>

#include "gradcodec/dtype.hpp"
#include "gradcodec/spec.hpp"
#include "gradcodec/status.hpp"
#include "gradcodec/views.hpp"

namespace gradcodec {

inline constexpr std::uint32_t frame_magic = 0x43444347u;  //!< bytes "GCDC"
inline constexpr std::uint8_t format_version = 1;
inline constexpr std::size_t header_bytes = 48;

//! Header flag bits; every other bit must be zero.
enum frame_flags : std::uint8_t {
  flag_nonfinite = 1u << 0,  //!< the encoded input held NaN or Inf
  flag_index64 = 1u << 1,    //!< sparse indices are u64 (set exactly when n >= 2^32)
};

//! Mode byte bits (meaning per codec, see docs/format.md); every other bit must be zero.
enum frame_mode : std::uint8_t {
  mode_stochastic = 1u << 0,  //!< qsgd/minmax: stochastic rounding
  mode_norm_max = 1u << 1,    //!< qsgd: max norm instead of L2
  mode_scale_shift = 2,       //!< sign: scale kind in bits 2..3
  mode_scale_mask = 3u << 2,
  mode_unbiased = 1u << 4,  //!< randomk: values scaled by stratum size
};

//! The decoded header.
struct frame_header {
  std::uint8_t version = format_version;
  codec_id codec = codec_id::topk;
  dtype type = dtype::f32;  //!< dtype of the encoded tensor (and of sparse values)
  std::uint8_t flags = 0;
  std::uint64_t n = 0;  //!< element count
  std::uint64_t payload_bytes = 0;
  std::uint64_t count = 0;  //!< sparse: items sent; powersgd: rows
  std::uint32_t group = 0;  //!< bucket size; powersgd: rank
  std::uint16_t level = 0;  //!< qsgd: levels; minmax: bits
  std::uint8_t mode = 0;
  float param = 0.0f;  //!< threshold: tau; dgc: sample; terngrad: clip; powersgd: eps

  [[nodiscard]] std::uint64_t frame_bytes() const noexcept { return header_bytes + payload_bytes; }
};

//! Reads and checks a header (magic, version, checksum, codec id, dtype, reserved bits, and
//! that the payload size is the one the header's fields imply). `frame` may hold only the
//! header or more; nothing is decoded.
result<frame_header> peek(const_bytes frame) noexcept;

//! Writes `h` (with its checksum) into the first header_bytes of `dst`.
void write_header(const frame_header& h, std::byte* dst) noexcept;

//! The exact payload size a well-formed frame with these header fields has, or an error
//! when the fields are inconsistent (the decoder's first line of defence).
result<std::uint64_t> expected_payload_bytes(const frame_header& h) noexcept;

//! CRC-32C (Castagnoli) of a byte range: the header checksum.
std::uint32_t crc32c(const std::byte* data, std::size_t size) noexcept;

}  // namespace gradcodec
