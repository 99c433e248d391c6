// SPDX-License-Identifier: Apache-2.0
//! @file
//! The scalar majority vote over `sign` frames (docs/codecs.md "Majority vote"), the oracle
//! the CPU backend's vote reproduces (contract/vote_kernels.hpp); src/vote.cpp checks the
//! frames first.
#include <algorithm>
#include <array>
#include <bit>
#include <cstdint>
#include <cstring>

#include "contract/vote_kernels.hpp"
#include "gradcodec/dtype.hpp"

namespace gradcodec {
namespace {

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

}  // namespace detail
}  // namespace gradcodec
