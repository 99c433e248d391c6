// SPDX-License-Identifier: Apache-2.0
//! @file
//! The wire format's vocabulary (docs/format.md): codec ids, the enums the header's mode
//! bits carry, the frame header and its flags, and the verdict of a checked decode. The
//! header-only blocks (gradcodec/blocks/) need nothing else of the API: no spec parser,
//! no <string>.
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "gradcodec/dtype.hpp"

namespace gradcodec {

//! Wire values: stored in the frame header, do not renumber.
enum class codec_id : std::uint8_t {
  topk = 1,
  dgc = 2,
  randomk = 3,
  threshold = 4,
  qsgd = 5,
  terngrad = 6,
  minmax = 7,
  onebit = 8,
  sign = 9,
  fp16 = 10,
  bf16 = 11,
  powersgd = 12,
  mxfp8 = 13,
  mxfp6 = 14,
  mxfp4 = 15,
  mxint8 = 16,
  nvfp4 = 17,
  fp8row = 18,
};
inline constexpr int codec_count = 18;

//! The case labels of the block-scaled codecs, for switches over codec_id (one list).
#define GRADCODEC_CASE_BLOCK_SCALED   \
  case ::gradcodec::codec_id::mxfp8:  \
  case ::gradcodec::codec_id::mxfp6:  \
  case ::gradcodec::codec_id::mxfp4:  \
  case ::gradcodec::codec_id::mxint8: \
  case ::gradcodec::codec_id::nvfp4:  \
  case ::gradcodec::codec_id::fp8row

enum class rounding_mode : std::uint8_t { nearest = 0, stochastic = 1 };
enum class norm_kind : std::uint8_t { l2 = 0, max = 1 };
enum class scale_kind : std::uint8_t { none = 0, mean = 1, l2 = 2 };
//! The element formats of the block-scaled codecs; wire values (the header's level).
enum class element_format : std::uint8_t {
  e4m3 = 1,
  e5m2 = 2,
  e3m2 = 3,
  e2m3 = 4,
  e2m1 = 5,
  int8 = 6
};

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
  mode_stochastic = 1u << 0,  //!< qsgd/minmax/block-scaled: stochastic rounding
  mode_norm_max = 1u << 1,    //!< qsgd: max norm instead of L2
  mode_scale_shift = 2,       //!< sign: scale kind in bits 2..3
  mode_scale_mask = 3u << 2,
  mode_unbiased = 1u << 4,  //!< randomk: values scaled by stratum size
  mode_rotate = 1u << 5,    //!< block-scaled codecs: randomized Hadamard rotation
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
  std::uint32_t group = 0;  //!< bucket size (block-scaled: block or row); powersgd: rank
  std::uint16_t level = 0;  //!< qsgd: levels; minmax: bits; block-scaled: element_format
  std::uint8_t mode = 0;
  float param = 0.0f;  //!< threshold: tau; dgc: sample; terngrad: clip; powersgd: eps

  [[nodiscard]] std::uint64_t frame_bytes() const noexcept { return header_bytes + payload_bytes; }
};

//! What a checked decode found. Zero means the frame was decoded.
enum class verdict_code : std::uint32_t {
  ok = 0,
  truncated = 1,            //!< shorter than the 48-byte header
  bad_magic = 2,            //!< not a gradcodec frame
  unsupported_version = 3,  //!< another format version
  header_checksum = 4,      //!< the header's CRC-32C does not match
  unexpected_field = 5,     //!< a header field differs from the expected header (`field`)
  bad_count = 6,            //!< threshold/dgc: count above n, or payload size inconsistent
  size_mismatch = 7,        //!< the frame is not 48 + payload_bytes long
  bad_indices = 8,          //!< sparse indices out of range or not strictly ascending
};

//! The outcome of one decode_expected call, 16 bytes in the frame's memory (device memory
//! for the CUDA backend). Written by every call that returns ok; read it after the work
//! is done (for CUDA: after the stream is synchronized).
struct frame_verdict {
  std::uint32_t code = 0;   //!< a verdict_code
  std::uint32_t field = 0;  //!< unexpected_field: byte offset of the first differing field
  std::uint64_t count = 0;  //!< the frame's count field as read (when the header passed)
};
// Bindings and device code rely on this layout (16 bytes, 8-byte aligned).
static_assert(sizeof(frame_verdict) == 16 && alignof(frame_verdict) == 8 &&
              std::is_standard_layout_v<frame_verdict>);

}  // namespace gradcodec
