// SPDX-License-Identifier: Apache-2.0
//! @file
//! Exactly rounded f32 arithmetic for the building blocks, the same on host and device.
//!
//! On the device every operation is an explicit round-to-nearest intrinsic (__fmul_rn,
//! __fadd_rn, ...): nvcc never contracts those into an FMA, so a kernel that uses the
//! blocks writes the library's bytes whatever its --fmad or --use_fast_math settings.
//! On the host the operations are plain C++; compile host code that must match the
//! library with -ffp-contract=off (GCC contracts a * b + c by default when FMA is enabled).
#pragma once

#include <cstdint>

#include "gradcodec/blocks/config.hpp"
#include "gradcodec/blocks/float16.hpp"

#if !defined(__CUDA_ARCH__)
#include <cmath>
#endif

namespace gradcodec::blocks {

GRADCODEC_HD float fmul(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
GRADCODEC_HD float fadd(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}
GRADCODEC_HD float fsub(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fsub_rn(a, b);
#else
  return a - b;
#endif
}
GRADCODEC_HD float fdiv(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}
GRADCODEC_HD float fsqrt(float a) {
#if defined(__CUDA_ARCH__)
  return __fsqrt_rn(a);
#else
  return std::sqrt(a);
#endif
}
//! a * b + c with one rounding.
GRADCODEC_HD float ffma(float a, float b, float c) {
#if defined(__CUDA_ARCH__)
  return __fmaf_rn(a, b, c);
#else
  return std::fma(a, b, c);
#endif
}
GRADCODEC_HD float ffloor(float a) {
#if defined(__CUDA_ARCH__)
  return floorf(a);
#else
  return std::floor(a);
#endif
}
GRADCODEC_HD float fabs_bits(float a) { return bits_float(float_bits(a) & 0x7FFFFFFFu); }

GRADCODEC_HD bool is_nan(float a) { return (float_bits(a) & 0x7FFFFFFFu) > 0x7F800000u; }
GRADCODEC_HD bool is_finite(float a) { return (float_bits(a) & 0x7F800000u) != 0x7F800000u; }

//! The one NaN a decoder writes (docs/guarantees.md): the sign and payload of a NaN made
//! from two NaN operands depend on operand order, which compilers and GPUs choose freely.
inline constexpr std::uint32_t canonical_nan_bits = 0x7FC00000u;
GRADCODEC_HD float canonical_nan() { return bits_float(canonical_nan_bits); }
GRADCODEC_HD float canonicalize_nan(float a) { return is_nan(a) ? canonical_nan() : a; }

//! a + b, a - b and a * b that return, when an operand is NaN, the NaN an x86 SSE/AVX
//! operation returns: the first NaN operand, quieted, and for Inf - Inf or 0 * Inf the
//! "indefinite" 0xFFC00000. GPUs return one fixed NaN instead; error-feedback sums
//! (p = g + e), residuals (e = p - d) and values scaled onto the wire (unbiased random-k)
//! use these so their bits, and the wire bytes, are the same on every backend.
GRADCODEC_HD float quiet(float a) { return bits_float(float_bits(a) | 0x00400000u); }
GRADCODEC_HD float fadd_nan_first(float a, float b) {
  if (is_nan(a)) return quiet(a);
  if (is_nan(b)) return quiet(b);
  const float r = fadd(a, b);
  return is_nan(r) ? bits_float(0xFFC00000u) : r;
}
GRADCODEC_HD float fsub_nan_first(float a, float b) {
  if (is_nan(a)) return quiet(a);
  if (is_nan(b)) return quiet(b);
  const float r = fsub(a, b);
  return is_nan(r) ? bits_float(0xFFC00000u) : r;
}
GRADCODEC_HD float fmul_nan_first(float a, float b) {
  if (is_nan(a)) return quiet(a);
  if (is_nan(b)) return quiet(b);
  const float r = fmul(a, b);
  return is_nan(r) ? bits_float(0xFFC00000u) : r;
}

//! The power-of-two pre-scale of docs/codecs.md "Scaled reductions" for a group whose
//! largest |v| is m: down = 2^-e and up = 2^e for m's exponent e clamped to [-126, 126].
struct prescale {
  float down, up;
};
GRADCODEC_HD prescale prescale_for(float m) {
  int e = static_cast<int>((float_bits(m) >> 23) & 0xFFu) - 127;
  e = e < -126 ? -126 : (e > 126 ? 126 : e);
  return {bits_float(static_cast<std::uint32_t>(127 - e) << 23),
          bits_float(static_cast<std::uint32_t>(127 + e) << 23)};
}

}  // namespace gradcodec::blocks
