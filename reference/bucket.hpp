// SPDX-License-Identifier: Apache-2.0
//! @file
//! Helpers shared by the reference bucketed codecs (qsgd, terngrad, minmax; usable by sign
//! and onebit): bucket iteration, the per-bucket scan (finite? max |v|), the canonical NaN
//! of a non-finite bucket, scale access, the bucket ratio and the level rounding rules of
//! docs/codecs.md "Bucketed quantizers".
#pragma once

#include "common.hpp"

namespace gradcodec::reference::bucketed {

//! The scale stored for every scale slot of a bucket that held NaN or Inf.
inline constexpr std::uint32_t nan_bits = 0x7FC00000u;
inline float canonical_nan() { return blocks::bits_float(nan_bits); }

//! Elements [begin, begin + len) of bucket b (buckets of `bucket` elements, the last may be
//! shorter).
struct span {
  std::uint64_t begin, len;
};
inline span bucket_at(std::uint64_t n, std::uint64_t bucket, std::uint64_t b) {
  const std::uint64_t begin = b * bucket;
  return {begin, std::min(n - begin, bucket)};
}

//! M = max |v| over a bucket, and whether every value is finite (M is meaningless if not).
struct scan_result {
  float max_abs;
  bool finite;
};
inline scan_result scan(const_tensor_view in, span s) {
  scan_result r{0.0f, true};
  for (std::uint64_t i = s.begin; i < s.begin + s.len; ++i) {
    const float v = load(in, i);
    if (!finite(v)) r.finite = false;
    const float a = std::fabs(v);
    if (a > r.max_abs) r.max_abs = a;
  }
  return r;
}

//! Checks the capacity, then zeroes the whole payload: codes are ORed into the bit stream
//! and padding must be zero. Returns false (nothing written) when the payload does not fit.
inline bool begin_payload(const detail::encode_call& c, const blocks::bucket_layout& l) {
  if (l.total > c.capacity) return false;
  std::fill(c.payload, c.payload + l.total, std::byte{0});
  return true;
}

//! Scale j of bucket b (bucket-major, `per` scales per bucket).
inline void put_scale(std::byte* payload, const blocks::bucket_layout& l, std::uint32_t per,
                      std::uint64_t b, std::uint32_t j, float x) {
  put<float>(payload + l.scales_offset + (b * per + j) * 4, x);
}
inline float get_scale(const std::byte* payload, const blocks::bucket_layout& l, std::uint32_t per,
                       std::uint64_t b, std::uint32_t j) {
  return get<float>(payload + l.scales_offset + (b * per + j) * 4);
}

//! x / d * k for 0 <= x <~ d, computed as (x * down) * inv with inv = k / (d * down) and
//! down from prescale_for(d): one division per bucket, and inv stays finite however small
//! d is (k / d alone overflows once d < k / FLT_MAX). Equal to x * (k / d) whenever no
//! product is subnormal. Requires d > 0 and finite.
struct ratio {
  float down, inv;
  float operator()(float x) const { return (x * down) * inv; }
};
inline ratio ratio_for(float d, float k) {
  const float down = prescale_for(d).down;
  return {down, k / (d * down)};
}

//! Round to nearest, halves up: floor(r + 0.5f) with the f32 add rounded. Requires r >= 0.
inline std::uint32_t nearest_level(float r) {
  return static_cast<std::uint32_t>(std::floor(r + 0.5f));
}

//! Stochastic rounding: floor(r) + 1 with probability r - floor(r) (u uniform in [0, 1)).
//! Requires r >= 0.
inline std::uint32_t stochastic_level(float r, float u) {
  const float f = std::floor(r);
  return static_cast<std::uint32_t>(f) + (u < r - f ? 1u : 0u);
}

//! The uniform of element i (global index) for stochastic rounding.
inline float rounding_uniform(const blocks::counter_rng& rng, std::uint64_t i) {
  return blocks::uniform01(rng.at(blocks::rng_stream::rounding, i));
}

}  // namespace gradcodec::reference::bucketed
