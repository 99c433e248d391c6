// SPDX-License-Identifier: Apache-2.0
//! @file
//! Plain scalar helpers shared by the reference codecs: element access in any dtype, the
//! canonical sum and scaled reductions of docs/codecs.md, and an LSB-first bit stream.
//! Written for clarity, not speed; the reference is the oracle the fast backends match.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "contract/backend.hpp"
#include "contract/scalar_values.hpp"
#include "gradcodec/blocks/bytes.hpp"
#include "gradcodec/blocks/float16.hpp"
#include "gradcodec/blocks/layout.hpp"
#include "gradcodec/blocks/pairwise.hpp"
#include "gradcodec/blocks/philox.hpp"

namespace gradcodec::reference {

inline float load(const_tensor_view v, std::uint64_t i) {
  return detail::load_value(v.data, v.type, i);
}
inline void store(tensor_view v, std::uint64_t i, float x) {
  detail::store_value(v.data, v.type, i, x);
}

//! Writes decoded value x at i: plain store, or acc = fma(alpha, x, acc) when accumulating;
//! a NaN is written as the canonical NaN.
inline void emit(const detail::decode_call& c, std::uint64_t i, float x) {
  store(c.out, i, detail::canonical_nan(c.accumulate ? std::fma(c.alpha, x, load(c.out, i)) : x));
}

using detail::get_value;
using detail::put_value;

using blocks::get;
using blocks::put;

//! Sum of one 256-value chunk: 16 strided lanes, folded 8, 4, 2, 1.
template <class Term>
float chunk_sum(std::uint64_t begin, std::uint64_t len, Term& term) {
  float lane[16] = {};
  for (std::uint64_t t = 0; t < 256 && begin + t < len; ++t)
    lane[t % 16] = lane[t % 16] + term(begin + t);
  for (int h = 8; h >= 1; h /= 2)
    for (int j = 0; j < h; ++j) lane[j] = lane[j] + lane[j + h];
  return lane[0];
}

//! The canonical sum of docs/codecs.md over term(0..len): chunk sums combined pairwise
//! with a binary-counter stack (no allocation).
template <class Term>
float canonical_sum(std::uint64_t len, Term term) {
  blocks::pairwise_sum sum;
  for (std::uint64_t c0 = 0; c0 < len; c0 += 256) sum.push(chunk_sum(c0, len, term));
  return sum.total();
}

//! The power-of-two pre-scale of docs/codecs.md for a group whose largest |v| is m.
struct prescale {
  float down, up;
};
inline prescale prescale_for(float m) {
  std::uint32_t bits;
  std::memcpy(&bits, &m, 4);
  const int e = std::clamp(static_cast<int>((bits >> 23) & 0xFFu) - 127, -126, 126);
  const std::uint32_t down = static_cast<std::uint32_t>(127 - e) << 23;
  const std::uint32_t up = static_cast<std::uint32_t>(127 + e) << 23;
  prescale p;
  std::memcpy(&p.down, &down, 4);
  std::memcpy(&p.up, &up, 4);
  return p;
}

inline bool finite(float x) { return std::isfinite(x); }

//! LSB-first bit stream: value i of `bits` bits occupies stream bits [i*bits, (i+1)*bits),
//! stream bit j being bit (j % 8) of byte j / 8.
inline void put_bits(std::byte* stream, std::uint64_t i, std::uint32_t bits, std::uint32_t value) {
  for (std::uint32_t b = 0; b < bits; ++b) {
    const std::uint64_t j = i * bits + b;
    if ((value >> b) & 1u) stream[j / 8] |= static_cast<std::byte>(1u << (j % 8));
  }
}
inline std::uint32_t get_bits(const std::byte* stream, std::uint64_t i, std::uint32_t bits) {
  std::uint32_t v = 0;
  for (std::uint32_t b = 0; b < bits; ++b) {
    const std::uint64_t j = i * bits + b;
    v |= ((static_cast<std::uint32_t>(stream[j / 8]) >> (j % 8)) & 1u) << b;
  }
  return v;
}

inline status too_small() {
  return {status_code::output_too_small, "output buffer too small for the payload"};
}
inline status corrupt(std::string_view why) { return {status_code::corrupt_frame, why}; }

// One declaration per reference codec file (reference/<codec>.cpp).
#define GRADCODEC_REFERENCE_CODEC(name)                                                   \
  std::size_t name##_workspace(const codec_spec&, const_tensor_view shape, operation op); \
  status name##_encode(const detail::encode_call& c);                                     \
  status name##_decode(const detail::decode_call& c);
GRADCODEC_REFERENCE_CODEC(topk)
GRADCODEC_REFERENCE_CODEC(dgc)
GRADCODEC_REFERENCE_CODEC(randomk)
GRADCODEC_REFERENCE_CODEC(threshold)
GRADCODEC_REFERENCE_CODEC(qsgd)
GRADCODEC_REFERENCE_CODEC(terngrad)
GRADCODEC_REFERENCE_CODEC(minmax)
GRADCODEC_REFERENCE_CODEC(onebit)
GRADCODEC_REFERENCE_CODEC(sign)
GRADCODEC_REFERENCE_CODEC(cast)
GRADCODEC_REFERENCE_CODEC(powersgd)
GRADCODEC_REFERENCE_CODEC(block_scaled)
#undef GRADCODEC_REFERENCE_CODEC

}  // namespace gradcodec::reference
