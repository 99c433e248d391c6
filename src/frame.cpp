// SPDX-License-Identifier: Apache-2.0
//! @file
//! The frame header: writing, reading and checking it (docs/format.md).
#include "gradcodec/frame.hpp"

#include <array>
#include <cmath>
#include <cstring>
#include <string>

#include "gradcodec/blocks/codec_traits.hpp"
#include "gradcodec/blocks/header.hpp"
#include "src/codecs/descriptor.hpp"

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
  const detail::codec_descriptor& codec = detail::descriptor_of(h.codec);
  const header_meaning& uses = codec.info.header;
  if (uses.count.empty() && h.count != 0) return corrupt("count must be zero for this codec");
  if (uses.group.empty() && h.group != 0) return corrupt("group must be zero for this codec");
  if (uses.level.empty() && h.level != 0) return corrupt("level must be zero for this codec");
  if (uses.param.empty() && h.param != 0.0f) return corrupt("param must be zero for this codec");
  if (!uses.param.empty() && !(h.param >= 0.0f && std::isfinite(h.param)))
    return corrupt("param out of range");
  const std::uint8_t modes = (traits.rounds ? mode_stochastic : 0) | codec.modes;
  if ((h.mode & ~modes) != 0) return corrupt("unknown mode bits");
  if (traits.bucketed && (h.group < 1 || h.group > (1u << 24)))
    return corrupt("bucket out of range");
  return codec.payload_from_header(h);
}

std::string describe_mode(codec_id c, std::uint8_t mode) {
  std::string s;
  const auto raw = static_cast<int>(c);
  if (raw < 1 || raw > codec_count) return "none";
  if (blocks::traits_of(c).rounds)
    detail::append_name(s, mode & mode_stochastic ? "stochastic" : "nearest");
  if (const auto names = detail::descriptor_of(c).mode_names) names(mode, s);
  return s.empty() ? "none" : s;
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
