// SPDX-License-Identifier: Apache-2.0
//! @file
//! The rules of the 1-bit codecs sign and onebit (docs/codecs.md "sign", "onebit") as
//! __host__ __device__ pieces: the sign bit of a value, the scales of a finite bucket
//! (reductions over a callable v(j) -> float, j in [0, len)), and the decoded value of a
//! (scales, bit) pair. A non-finite bucket carries canonical_nan() scales and zero bits.
#pragma once

#include <cstdint>

#include "gradcodec/blocks/canonical_sum.hpp"
#include "gradcodec/blocks/config.hpp"
#include "gradcodec/blocks/fmath.hpp"
#include "gradcodec/format.hpp"

namespace gradcodec::blocks {

//! 1 for a value < 0; +0.0, -0.0 and every positive value give 0.
GRADCODEC_HD std::uint32_t sign_bit(float v) { return v < 0.0f ? 1u : 0u; }

//! The bit of v in a bucket whose first stored scale is scale0: a non-finite bucket (NaN
//! scales; a finite bucket's scales are never NaN) keeps zero bits. Lets a codes pass work
//! from the payload's scales alone.
GRADCODEC_HD std::uint32_t sign_code(float scale0, float v) {
  return is_nan(scale0) ? 0u : sign_bit(v);
}

//! The sign codec's scale of a finite bucket whose largest |v| is max_abs: 1, mean |v|, or
//! ||v||2 / sqrt(len).
template <class Value, class Reducer = sequential_reducer>
GRADCODEC_HD float sign_scale(scale_kind kind, std::uint64_t len, Value v, float max_abs,
                              Reducer red = {}) {
  if (kind == scale_kind::none) return 1.0f;
  const prescale p = prescale_for(max_abs);
  const float n = static_cast<float>(len);
  if (kind == scale_kind::mean)
    return fmul(
        fdiv(red.sum(len, [&](std::uint64_t j) { return fmul(fabs_bits(v(j)), p.down); }), n),
        p.up);
  const float sq = red.sum(len, [&](std::uint64_t j) {
    const float t = fmul(v(j), p.down);
    return fmul(t, t);
  });
  return fmul(fsqrt(fdiv(sq, n)), p.up);
}

//! -scale for bit 1, scale for bit 0; a NaN scale decodes as itself.
GRADCODEC_HD float sign_value(float scale, std::uint32_t bit) {
  if (is_nan(scale)) return scale;
  return bit != 0 ? -scale : scale;
}

//! onebit's two reconstruction values of a finite bucket: means[0] the mean of its
//! negative values, means[1] of the others (0 for an empty side).
template <class Value, class Reducer = sequential_reducer>
GRADCODEC_HD void onebit_means(std::uint64_t len, Value v, float max_abs, float* means,
                               Reducer red = {}) {
  const prescale p = prescale_for(max_abs);
  const float neg = red.sum(len, [&](std::uint64_t j) {
    const float x = v(j);
    return x < 0.0f ? fmul(x, p.down) : 0.0f;
  });
  const float pos = red.sum(len, [&](std::uint64_t j) {
    const float x = v(j);
    return x >= 0.0f ? fmul(x, p.down) : 0.0f;
  });
  const std::uint64_t count_neg = red.count(len, [&](std::uint64_t j) { return v(j) < 0.0f; });
  const std::uint64_t count_pos = len - count_neg;
  means[0] = count_neg > 0 ? fmul(fdiv(neg, static_cast<float>(count_neg)), p.up) : 0.0f;
  means[1] = count_pos > 0 ? fmul(fdiv(pos, static_cast<float>(count_pos)), p.up) : 0.0f;
}

GRADCODEC_HD float onebit_value(const float* means, std::uint32_t bit) {
  return bit != 0 ? means[0] : means[1];
}

}  // namespace gradcodec::blocks
