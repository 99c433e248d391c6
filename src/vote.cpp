// SPDX-License-Identifier: Apache-2.0
//! @file
//! signSGD majority vote over `sign` frames (docs/codecs.md "Majority vote"): the checks of
//! the public function, and the scalar kernel that is the oracle for the CPU backend's
//! (contract/vote_kernels.hpp).
#include "gradcodec/vote.hpp"

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>

#include "contract/scalar_values.hpp"
#include "contract/vote_kernels.hpp"
#include "gradcodec/blocks/float16.hpp"
#include "gradcodec/blocks/layout.hpp"
#include "gradcodec/frame.hpp"

namespace gradcodec {
namespace {

//! A status whose message names the offending frame (no allocation: status keeps it inline).
status frame_error(status_code code, std::size_t index, const char* what) {
  char msg[status::max_message + 1];
  std::snprintf(msg, sizeof msg, "frame %zu: %s", index, what);
  return {code, msg};
}

void put16(std::byte* dst, std::uint16_t h) { std::memcpy(dst, &h, 2); }

//! The bytes of x in dtype t, its NaN canonical: compilers fold `alpha * -1.0f` into a sign
//! flip while the hardware keeps a NaN's sign, so a NaN's bits would depend on the build.
void vote_value_bytes(std::byte* dst, float x, dtype t) {
  x = detail::canonical_nan(x);
  switch (t) {
    case dtype::f32: std::memcpy(dst, &x, 4); return;
    case dtype::f16: put16(dst, blocks::f32_to_f16(x)); return;
    case dtype::bf16: put16(dst, blocks::f32_to_bf16(x)); return;
  }
}

//! Code bits of elements [i, i + 56) of a frame (fewer at the end of the stream), bit j
//! for element i + j: the stream is LSB-first, so a little-endian load shifted by i % 8.
std::uint64_t bits_at(const std::byte* codes, std::uint64_t code_bytes, std::uint64_t i) {
  const std::uint64_t at = i / 8;
  std::uint64_t w = 0;
  if (code_bytes - at >= 8)  // a fixed size: loaded inline, not by a call
    std::memcpy(&w, codes + at, 8);
  else
    std::memcpy(&w, codes + at, code_bytes - at);
  if constexpr (std::endian::native == std::endian::big) w = __builtin_bswap64(w);
  return w >> (i % 8);
}

//! Byte j of spread[b] is bit j of b: adding spread[bits] to a u64 counts eight elements'
//! bits at once, one byte counter each (SWAR).
constexpr std::array<std::uint64_t, 256> make_spread() {
  std::array<std::uint64_t, 256> t{};
  for (unsigned b = 0; b < 256; ++b)
    for (unsigned j = 0; j < 8; ++j) t[b] |= static_cast<std::uint64_t>((b >> j) & 1u) << (8 * j);
  return t;
}
constexpr std::array<std::uint64_t, 256> spread = make_spread();

//! Votes elements [begin, end) of one bucket into dst, whose elements are Word-sized. The
//! elements go in runs of up to 56: one 64-bit load per frame gives a run's bits. With at
//! most 255 frames the negative signs are counted in byte counters, eight elements per
//! addition; with more, one u32 counter per element. The values are chosen with masks, not
//! branches (neighbouring votes are as good as random, so a branch per element mispredicts),
//! the byte counters are read as bytes, and full runs leave by a fixed-size copy: 2^26
//! elements, 4 frames, `bench_sign` majority_vote/4: 309 -> 48 ms (docs/performance.md).
template <class Word>
void vote_bucket(const detail::vote_call& c, std::uint64_t begin, std::uint64_t end,
                 std::byte* dst) {
  constexpr std::uint64_t run = 56;
  Word value[3];
  for (int k = 0; k < 3; ++k) std::memcpy(&value[k], c.values[k], sizeof(Word));
  const auto votes = static_cast<std::uint32_t>(c.frames.size());
  // sum = votes - 2 * neg: positive when 2 * neg < votes (neg < above), negative when
  // 2 * neg > votes (neg > below), 0 at a tie.
  const std::uint32_t above = (votes + 1) / 2, below = votes / 2;
  Word out[run];
  // out[j] from the count of negative signs of element i + j.
  const auto choose = [&](const auto* neg) {
    for (unsigned j = 0; j < run; ++j) {
      const Word pos = neg[j] < above ? static_cast<Word>(~Word{0}) : Word{0};
      const Word negative = neg[j] > below ? static_cast<Word>(~Word{0}) : Word{0};
      out[j] = static_cast<Word>((value[0] & pos) | (value[1] & negative) |
                                 (value[2] & static_cast<Word>(~(pos | negative))));
    }
  };
  for (std::uint64_t i = begin; i < end; i += run) {
    const auto len = static_cast<unsigned>(std::min(run, end - i));
    if (votes <= 255) {
      std::uint64_t lanes[run / 8] = {};
      for (std::size_t f = 0; f < c.frames.size(); ++f) {
        const std::uint64_t w = bits_at(detail::vote_codes(c, f), c.layout.codes_bytes, i);
        for (unsigned k = 0; k < run / 8; ++k) lanes[k] += spread[(w >> (8 * k)) & 0xFFu];
      }
      // Byte j % 8 of lanes[j / 8] counts element j.
      std::uint8_t neg[run];
      if constexpr (std::endian::native == std::endian::little) {
        std::memcpy(neg, lanes, run);
      } else {
        for (unsigned j = 0; j < run; ++j)
          neg[j] = static_cast<std::uint8_t>(lanes[j / 8] >> (8 * (j % 8)));
      }
      choose(neg);
    } else {
      std::uint32_t neg[run] = {};
      for (std::size_t f = 0; f < c.frames.size(); ++f) {
        const std::uint64_t w = bits_at(detail::vote_codes(c, f), c.layout.codes_bytes, i);
        for (unsigned j = 0; j < run; ++j) neg[j] += static_cast<std::uint32_t>((w >> j) & 1u);
      }
      choose(neg);
    }
    if (len == run)  // a fixed size: copied inline, not by a call
      std::memcpy(dst + i * sizeof(Word), out, sizeof out);
    else
      std::memcpy(dst + i * sizeof(Word), out, len * sizeof(Word));
  }
}

void scalar_vote(const detail::vote_call& c) {
  const std::uint64_t size = dtype_size(c.out.type);
  auto* dst = static_cast<std::byte*>(c.out.data);
  for (std::uint64_t b = 0; b < c.layout.buckets; ++b) {
    const std::uint64_t begin = b * c.bucket;
    const std::uint64_t end = std::min(c.n, begin + c.bucket);
    if (detail::vote_poisoned(c, b)) {
      for (std::uint64_t i = begin; i < end; ++i) std::memcpy(dst + i * size, c.values[3], size);
      continue;
    }
    if (size == 4)
      vote_bucket<std::uint32_t>(c, begin, end, dst);
    else
      vote_bucket<std::uint16_t>(c, begin, end, dst);
  }
}

}  // namespace

namespace detail {

const vote_kernels& vote_scalar_kernels() noexcept {
  static const vote_kernels k{"scalar-reference", scalar_vote};
  return k;
}

status majority_vote_with(const vote_kernels& k, std::span<const const_bytes> frames,
                          tensor_view out, float alpha) noexcept {
  if (frames.empty()) return {status_code::invalid_argument, "majority vote of no frames"};
  if (frames.size() > 0xFFFFFFFFu)  // the counts are 32-bit
    return {status_code::invalid_argument, "majority vote of more than 2^32 - 1 frames"};
  if (!dtype_valid(static_cast<std::uint8_t>(out.type)))
    return {status_code::invalid_argument, "output: unknown dtype"};
  if (out.n > 0 && out.data == nullptr) return {status_code::invalid_argument, "output: null data"};

  std::uint64_t n = 0;
  std::uint32_t bucket = 0;
  for (std::size_t f = 0; f < frames.size(); ++f) {
    auto h = peek(frames[f]);
    if (!h) return frame_error(h.error().code(), f, h.error().message());
    if (h.value().codec != codec_id::sign)
      return frame_error(status_code::corrupt_frame, f, "not a sign frame");
    if (frames[f].size() != h.value().frame_bytes())
      return frame_error(status_code::corrupt_frame, f,
                         "length differs from the header's frame size");
    if (f == 0) {
      n = h.value().n;
      bucket = h.value().group;
    } else if (h.value().n != n) {
      return frame_error(status_code::shape_mismatch, f, "element count differs from frame 0");
    } else if (h.value().group != bucket) {
      return frame_error(status_code::shape_mismatch, f, "bucket size differs from frame 0");
    }
  }
  if (out.n != n)
    return {status_code::shape_mismatch, "output length differs from the frames' element count"};

  vote_call c{frames, blocks::bucket_layout_of(n, bucket, 1, 1), n, bucket, out, {}};
  vote_value_bytes(c.values[0], alpha * 1.0f, out.type);
  vote_value_bytes(c.values[1], alpha * -1.0f, out.type);
  vote_value_bytes(c.values[2], alpha * 0.0f, out.type);
  vote_value_bytes(c.values[3], std::numeric_limits<float>::quiet_NaN(), out.type);
  k.vote(c);
  return {};
}

}  // namespace detail

status sign_majority_vote(std::span<const const_bytes> frames, tensor_view out,
                          float alpha) noexcept {
#if GRADCODEC_HAVE_CPU_BACKEND
  if (const detail::vote_kernels* k = detail::cpu_vote_kernels())
    return detail::majority_vote_with(*k, frames, out, alpha);
#endif
  return detail::majority_vote_with(detail::vote_scalar_kernels(), frames, out, alpha);
}

}  // namespace gradcodec
