// SPDX-License-Identifier: Apache-2.0
//! @file
//! The per-bucket and per-element rules of the bucketed quantizers qsgd, terngrad and
//! minmax (docs/codecs.md "Bucketed quantizers"), as __host__ __device__ pieces:
//!
//! - a scale reduction per bucket (over a reducer: one thread by default, or a warp)
//! (`bucket_scan`, `qsgd_norm`, `terngrad_clip_bound`,
//!   `minmax_range`), each over a callable v(j) -> float for j in [0, len) of the bucket;
//! - a quantizer made once per bucket from its scales, whose code(v, u) gives the code of
//!   one value (u: the element's uniform from blocks/philox.hpp, used only when rounding
//!   stochastically);
//! - a dequantizer made once per bucket, whose value(code) gives the decoded f32.
//!
//! With blocks/layout.hpp (where scales and codes go), blocks/bitstream.hpp (how codes
//! pack) and blocks/philox.hpp (the uniforms) a kernel outside the library, an optimizer
//! step say, writes exactly the payload the library's encode writes (tests/
//! test_blocks_fused.cpp and tests/cuda/fused_kernel_test.cu do that). Non-finite buckets:
//! the scales are canonical_nan(); quantizers made from them return the documented codes.
#pragma once

#include <cstdint>

#include "gradcodec/blocks/canonical_sum.hpp"
#include "gradcodec/blocks/config.hpp"
#include "gradcodec/blocks/fmath.hpp"

namespace gradcodec::blocks {

inline constexpr std::uint32_t float_max_bits = 0x7F7FFFFFu;

//! One pass over a bucket: whether every value is finite, and the largest |v|.
struct bucket_scan {
  float max_abs = 0.0f;
  bool finite = true;
  GRADCODEC_HD void add(float v) {
    if (!is_finite(v)) finite = false;
    const float a = fabs_bits(v);
    if (a > max_abs) max_abs = a;
  }
};

//! x / d * k for 0 <= x <~ d as (x * down) * inv, with down = prescale_for(d).down and
//! inv = k / (d * down): one division per bucket, finite however small d is.
struct level_ratio {
  float down = 0.0f, inv = 0.0f;
  GRADCODEC_HD static level_ratio of(float d, float k) {
    const float down = prescale_for(d).down;
    return {down, fdiv(k, fmul(d, down))};
  }
  GRADCODEC_HD float operator()(float x) const { return fmul(fmul(x, down), inv); }
};

//! Round to nearest, halves up (r >= 0).
GRADCODEC_HD std::uint32_t nearest_level(float r) {
  return static_cast<std::uint32_t>(ffloor(fadd(r, 0.5f)));
}
//! floor(r) + 1 with probability r - floor(r), u uniform in [0, 1) (r >= 0).
GRADCODEC_HD std::uint32_t stochastic_level(float r, float u) {
  const float f = ffloor(r);
  return static_cast<std::uint32_t>(f) + (u < fsub(r, f) ? 1u : 0u);
}
GRADCODEC_HD std::uint32_t round_level(float r, bool stochastic, float u) {
  return stochastic ? stochastic_level(r, u) : nearest_level(r);
}

// ---- qsgd -----------------------------------------------------------------------------

//! ceil(log2(2s + 1)): bits per code for s levels.
GRADCODEC_HD std::uint32_t qsgd_code_bits(std::uint32_t s) {
  std::uint32_t bits = 1;
  while ((1u << bits) < 2u * s + 1u) ++bits;
  return bits;
}

//! The bucket's norm: max |v| or the L2 norm (capped at FLT_MAX); NaN for a non-finite bucket.
template <class Value, class Reducer = sequential_reducer>
GRADCODEC_HD float qsgd_norm(std::uint64_t len, Value v, bucket_scan m, bool max_norm,
                             Reducer red = {}) {
  if (!m.finite) return canonical_nan();
  if (max_norm) return m.max_abs;
  const prescale p = prescale_for(m.max_abs);
  const float sum = red.sum(len, [&](std::uint64_t j) {
    const float t = fmul(v(j), p.down);
    return fmul(t, t);
  });
  const float norm = fmul(fsqrt(sum), p.up);
  return is_finite(norm) ? norm : bits_float(float_max_bits);
}

struct qsgd_quantizer {
  level_ratio ratio;
  std::uint32_t s = 0;
  bool degenerate = true;  //!< norm 0 or NaN: every code is s (the zero level)

  GRADCODEC_HD static qsgd_quantizer of(float norm, std::uint32_t s) {
    qsgd_quantizer q;
    q.s = s;
    q.degenerate = !(norm > 0.0f);
    if (!q.degenerate) q.ratio = level_ratio::of(norm, static_cast<float>(s));
    return q;
  }
  //! Code s - l for a negative v, s + l otherwise (-0.0 takes the +0 level).
  GRADCODEC_HD std::uint32_t code(float v, bool stochastic, float u) const {
    if (degenerate) return s;
    std::uint32_t lv = round_level(ratio(fabs_bits(v)), stochastic, u);
    if (lv > s) lv = s;
    return v < 0.0f ? s - lv : s + lv;
  }
};

struct qsgd_dequantizer {
  float step = 0.0f, up = 0.0f;
  std::uint32_t s = 0;

  GRADCODEC_HD static qsgd_dequantizer of(float norm, std::uint32_t s) {
    const float fs = static_cast<float>(s);
    const prescale p = prescale_for(norm);
    const float nd = fmul(norm, p.down);
    float step = fdiv(nd, fs);
    // One ulp down when s * step rounds above nd: |q * step| <= nd for every level.
    if (step > 0.0f && fmul(step, fs) > nd) step = bits_float(float_bits(step) - 1u);
    return {step, p.up, s};
  }
  //! Codes above 2s read as 2s.
  GRADCODEC_HD float value(std::uint32_t code) const {
    if (code > 2u * s) code = 2u * s;
    const float q =
        static_cast<float>(static_cast<std::int32_t>(code) - static_cast<std::int32_t>(s));
    return fmul(fmul(q, step), up);
  }
};

// ---- terngrad -------------------------------------------------------------------------

inline constexpr std::uint32_t terngrad_code_bits = 2;

//! clip * sigma of a finite bucket (its largest |v| is max_abs); +Inf when clip is 0.
template <class Value, class Reducer = sequential_reducer>
GRADCODEC_HD float terngrad_clip_bound(std::uint64_t len, Value v, float max_abs, float clip,
                                       Reducer red = {}) {
  if (!(clip > 0.0f)) return bits_float(0x7F800000u);
  const prescale p = prescale_for(max_abs);
  const float n = static_cast<float>(len);
  const float mean = fdiv(red.sum(len, [&](std::uint64_t j) { return fmul(v(j), p.down); }), n);
  const float var = fdiv(red.sum(len,
                                 [&](std::uint64_t j) {
                                   const float d = fsub(fmul(v(j), p.down), mean);
                                   return fmul(d, d);
                                 }),
                         n);
  return fmul(clip, fmul(fsqrt(var), p.up));
}

struct terngrad_quantizer {
  float scale = 0.0f;  //!< s = min(max |v|, clip bound); NaN for a non-finite bucket
  float bound = 0.0f;  //!< values are clipped to [-bound, bound] first
  level_ratio prob;

  GRADCODEC_HD static terngrad_quantizer of(bucket_scan m, float bound) {
    terngrad_quantizer q;
    q.bound = bound;
    q.scale = !m.finite ? canonical_nan() : (bound < m.max_abs ? bound : m.max_abs);
    if (q.scale > 0.0f) q.prob = level_ratio::of(q.scale, 1.0f);
    return q;
  }
  //! The quantizer of a bucket whose stored scale is s: clipping at s instead of the clip
  //! bound changes nothing (s is the bound when the bound is below max |v|, and no value
  //! exceeds s otherwise), so a codes pass needs only the payload's scale.
  GRADCODEC_HD static terngrad_quantizer from_scale(float s) {
    terngrad_quantizer q;
    q.scale = s;
    q.bound = s;
    if (s > 0.0f) q.prob = level_ratio::of(s, 1.0f);
    return q;
  }
  //! 01 (+s) or 11 (-s) with probability |w| / s, else 00.
  GRADCODEC_HD std::uint32_t code(float v, float u) const {
    if (!(scale > 0.0f)) return 0;
    const float w = v < -bound ? -bound : (v > bound ? bound : v);
    if (!(u < prob(fabs_bits(w)))) return 0;
    return w < 0.0f ? 3u : 1u;
  }
};

//! t * s, t in {-1, 0, +1} (10 reads as 0): a NaN scale makes every element NaN.
GRADCODEC_HD float terngrad_value(float scale, std::uint32_t code) {
  const float t = (code & 1u) ? ((code & 2u) ? -1.0f : 1.0f) : 0.0f;
  return fmul(t, scale);
}

// ---- minmax ---------------------------------------------------------------------------

//! lo and hi of a finite bucket (-0.0 counts as +0.0).
struct minmax_range {
  float lo = bits_float(0x7F800000u), hi = bits_float(0xFF800000u);
  GRADCODEC_HD void add(float v) {
    v = fadd(v, 0.0f);
    if (v < lo) lo = v;
    if (v > hi) hi = v;
  }
};

GRADCODEC_HD prescale minmax_prescale(float lo, float hi) {
  const float a = fabs_bits(lo), b = fabs_bits(hi);
  return prescale_for(a < b ? b : a);
}

struct minmax_quantizer {
  float down = 0.0f, lo_d = 0.0f, inv = 0.0f;
  std::uint32_t levels = 0;
  bool constant = true;  //!< hi == lo, or NaN scales: every code is 0

  GRADCODEC_HD static minmax_quantizer of(float lo, float hi, std::uint32_t bits) {
    minmax_quantizer q;
    q.levels = (1u << bits) - 1u;
    const prescale p = minmax_prescale(lo, hi);
    q.down = p.down;
    q.lo_d = fmul(lo, p.down);
    const float h_d = fsub(fmul(hi, p.down), q.lo_d);
    q.constant = !(h_d > 0.0f);
    if (!q.constant) q.inv = fdiv(static_cast<float>(q.levels), h_d);
    return q;
  }
  GRADCODEC_HD std::uint32_t code(float v, bool stochastic, float u) const {
    if (constant) return 0;
    const std::uint32_t q = round_level(fmul(fsub(fmul(v, down), lo_d), inv), stochastic, u);
    return q < levels ? q : levels;
  }
};

struct minmax_dequantizer {
  float lo = 0.0f, hi = 0.0f, lo_d = 0.0f, step = 0.0f, up = 0.0f;

  GRADCODEC_HD static minmax_dequantizer of(float lo, float hi, std::uint32_t bits) {
    const prescale p = minmax_prescale(lo, hi);
    const float lo_d = fmul(lo, p.down);
    const float step = fdiv(fsub(fmul(hi, p.down), lo_d), static_cast<float>((1u << bits) - 1u));
    return {lo, hi, lo_d, step, p.up};
  }
  //! Clamped to [lo, hi]: rounding may step just past either end. A NaN stays NaN.
  GRADCODEC_HD float value(std::uint32_t code) const {
    float x = fmul(ffma(static_cast<float>(code), step, lo_d), up);
    if (x < lo) x = lo;
    if (x > hi) x = hi;
    return x;
  }
};

}  // namespace gradcodec::blocks
