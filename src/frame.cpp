// SPDX-License-Identifier: Apache-2.0
//! @file
//! The frame header: writing, reading and checking it (docs/format.md).
#include "gradcodec/frame.hpp"

#include <array>
#include <cmath>
#include <cstring>

#include "gradcodec/blocks/block_scaled.hpp"
#include "gradcodec/blocks/codec_traits.hpp"
#include "gradcodec/blocks/header.hpp"
#include "gradcodec/blocks/layout.hpp"

namespace gradcodec {
namespace {

constexpr std::array<std::uint32_t, 256> make_crc_table() {
  std::array<std::uint32_t, 256> t{};
  for (std::uint32_t i = 0; i < 256; ++i) {
    std::uint32_t c = i;
    for (int b = 0; b < 8; ++b) c = (c & 1u) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
    t[i] = c;
  }
  return t;
}
constexpr auto crc_table = make_crc_table();

template <class T>
void put(std::byte* dst, std::size_t off, T v) {
  // Little-endian on every supported host (x86-64, aarch64); see docs/format.md.
  std::memcpy(dst + off, &v, sizeof v);
}
template <class T>
T get(const std::byte* src, std::size_t off) {
  T v;
  std::memcpy(&v, src + off, sizeof v);
  return v;
}

status corrupt(std::string_view why) { return {status_code::corrupt_frame, why}; }

constexpr std::uint64_t max_elements = std::uint64_t{1} << 48;

}  // namespace

std::uint32_t crc32c(const std::byte* data, std::size_t size) noexcept {
  std::uint32_t c = 0xFFFFFFFFu;
  for (std::size_t i = 0; i < size; ++i)
    c = crc_table[(c ^ static_cast<std::uint8_t>(data[i])) & 0xFFu] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

void write_header(const frame_header& h, std::byte* dst) noexcept {
  // One serializer for host and device (blocks/header.hpp).
  blocks::serialize_header(h, reinterpret_cast<std::uint8_t*>(dst));
}

result<std::uint64_t> expected_payload_bytes(const frame_header& h) noexcept {
  using namespace blocks;
  const auto id = static_cast<int>(h.codec);
  if (id < 1 || id > codec_count) return corrupt("unknown codec id");
  if (!dtype_valid(static_cast<std::uint8_t>(h.type))) return corrupt("unknown dtype");
  if (h.n > max_elements) return corrupt("element count above 2^48");
  if ((h.flags & ~(flag_nonfinite | flag_index64)) != 0) return corrupt("unknown flag bits");
  const bool index64 = (h.flags & flag_index64) != 0;
  const codec_traits traits = traits_of(h.codec);
  const bool want_index64 = traits.indexed && h.n > 0xFFFFFFFFu;
  if (index64 != want_index64) return corrupt("index width flag does not match n");

  // Fields a codec does not use must be zero; the ones it uses must be in range.
  const bool uses_count = traits.selects || traits.matrix;
  const bool uses_group = traits.bucketed || traits.matrix;
  const bool uses_level = traits.rounds;  // the grid: qsgd levels, minmax bits, element format
  const bool uses_param = h.codec == codec_id::threshold || h.codec == codec_id::dgc ||
                          h.codec == codec_id::terngrad || h.codec == codec_id::powersgd;
  std::uint8_t modes = traits.rounds ? mode_stochastic : 0;
  if (h.codec == codec_id::qsgd) modes |= mode_norm_max;
  if (h.codec == codec_id::sign) modes = mode_scale_mask;
  if (h.codec == codec_id::randomk) modes = mode_unbiased;
  if (traits.block_scaled) modes |= mode_rotate;
  if (!uses_count && h.count != 0) return corrupt("count must be zero for this codec");
  if (!uses_group && h.group != 0) return corrupt("group must be zero for this codec");
  if (!uses_level && h.level != 0) return corrupt("level must be zero for this codec");
  if (!uses_param && h.param != 0.0f) return corrupt("param must be zero for this codec");
  if (uses_param && !(h.param >= 0.0f && std::isfinite(h.param)))
    return corrupt("param out of range");
  if ((h.mode & ~modes) != 0) return corrupt("unknown mode bits");
  if (h.codec == codec_id::sign && ((h.mode & mode_scale_mask) >> mode_scale_shift) > 2)
    return corrupt("unknown sign scale");
  if (traits.bucketed && (h.group < 1 || h.group > (1u << 24)))
    return corrupt("bucket out of range");

  const std::uint64_t vsize = dtype_size(h.type);
  switch (h.codec) {
    case codec_id::topk:
    case codec_id::dgc:
    case codec_id::threshold:
      if (h.count > h.n) return corrupt("count above n");
      return sparse_layout_of(h.count, vsize, index64).total;
    case codec_id::randomk:
      if (h.count > h.n) return corrupt("count above n");
      return randomk_layout_of(h.count, vsize).total;
    case codec_id::qsgd: {
      if (h.level < 1 || h.level > 127) return corrupt("levels out of range");
      std::uint32_t bits = 1;
      while ((1u << bits) < 2u * h.level + 1u) ++bits;
      return bucket_layout_of(h.n, h.group, 1, bits).total;
    }
    case codec_id::terngrad: return bucket_layout_of(h.n, h.group, 1, 2).total;
    case codec_id::minmax:
      if (h.level < 1 || h.level > 8) return corrupt("bits out of range");
      return bucket_layout_of(h.n, h.group, 2, h.level).total;
    case codec_id::onebit: return bucket_layout_of(h.n, h.group, 2, 1).total;
    case codec_id::sign: return bucket_layout_of(h.n, h.group, 1, 1).total;
    case codec_id::fp16:
    case codec_id::bf16:
      return cast_payload_bytes(h.n);
    GRADCODEC_CASE_BLOCK_SCALED : {
      const auto fmt = static_cast<element_format>(h.level);
      if (!element_allowed(h.codec, fmt)) return corrupt("element format not of this codec");
      return layout_of(block_rule_of(h.codec, fmt, h.mode), h.n, h.group).total;
    }
    case codec_id::powersgd: {
      if (h.n == 0) {
        if (h.count != 0 || h.group != 0) return corrupt("empty powersgd frame with a shape");
        return std::uint64_t{0};
      }
      if (h.count < 1 || h.n % h.count != 0) return corrupt("rows do not divide n");
      const std::uint64_t cols = h.n / h.count;
      if (h.group > 64 || h.group > h.count || h.group > cols) return corrupt("rank out of range");
      return powersgd_layout_of(h.count, cols, h.group).total;
    }
  }
  return corrupt("unknown codec id");
}

result<frame_header> peek(const_bytes frame) noexcept {
  if (frame.size() < header_bytes) return corrupt("truncated: shorter than the 48-byte header");
  const std::byte* p = frame.data();
  if (get<std::uint32_t>(p, 0) != frame_magic) return corrupt("bad magic (not a gradcodec frame)");
  frame_header h;
  h.version = get<std::uint8_t>(p, 4);
  if (h.version != format_version)
    return status{status_code::unsupported_version, "unsupported format version"};
  if (get<std::uint32_t>(p, 44) != crc32c(p, 44)) return corrupt("header checksum mismatch");
  if (get<std::uint8_t>(p, 39) != 0) return corrupt("reserved header byte is not zero");
  h.codec = static_cast<codec_id>(get<std::uint8_t>(p, 5));
  h.type = static_cast<dtype>(get<std::uint8_t>(p, 6));
  h.flags = get<std::uint8_t>(p, 7);
  h.n = get<std::uint64_t>(p, 8);
  h.payload_bytes = get<std::uint64_t>(p, 16);
  h.count = get<std::uint64_t>(p, 24);
  h.group = get<std::uint32_t>(p, 32);
  h.level = get<std::uint16_t>(p, 36);
  h.mode = get<std::uint8_t>(p, 38);
  h.param = get<float>(p, 40);
  auto want = expected_payload_bytes(h);
  if (!want) return want.error();
  if (want.value() != h.payload_bytes)
    return corrupt("payload size does not match the header fields");
  return h;
}

}  // namespace gradcodec
