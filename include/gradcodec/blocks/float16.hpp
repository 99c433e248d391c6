// SPDX-License-Identifier: Apache-2.0
//! @file
//! Bit-exact IEEE binary16 and bfloat16 conversions, round to nearest even, NaN kept
//! quiet and NaN. Written on integer bits so every backend produces identical results
//! (they match F16C's vcvtps2ph with rounding mode 0 and CUDA's __float2half_rn).
#pragma once

#include <cstdint>
#include <cstring>

#include "gradcodec/blocks/config.hpp"

namespace gradcodec::blocks {

GRADCODEC_HD std::uint32_t float_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
#endif
}

GRADCODEC_HD float bits_float(std::uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, 4);
  return f;
#endif
}

//! f32 -> f16, round to nearest even; overflow goes to +-Inf, NaN stays a quiet NaN
//! with the sign and the top payload bits.
GRADCODEC_HD std::uint16_t f32_to_f16(float f) {
  const std::uint32_t x = float_bits(f);
  const std::uint32_t sign = (x >> 16) & 0x8000u;
  const std::uint32_t ax = x & 0x7FFFFFFFu;
  if (ax >= 0x7F800000u) {  // Inf or NaN
    if (ax == 0x7F800000u) return static_cast<std::uint16_t>(sign | 0x7C00u);
    return static_cast<std::uint16_t>(sign | 0x7E00u | ((ax >> 13) & 0x3FFu));
  }
  if (ax >= 0x477FF000u) return static_cast<std::uint16_t>(sign | 0x7C00u);  // rounds to Inf
  if (ax >= 0x38800000u) {                                                   // normal f16
    const std::uint32_t mant_odd = (ax >> 13) & 1u;
    const std::uint32_t r = ax + 0xFFFu + mant_odd;  // RNE on the 13 dropped bits
    return static_cast<std::uint16_t>(sign | ((r - 0x38000000u) >> 13));
  }
  if (ax < 0x33000000u) return static_cast<std::uint16_t>(sign);  // below half the min subnormal
  // Subnormal f16: shift the full significand right and round to nearest even.
  const std::uint32_t e = ax >> 23;
  const std::uint32_t m = (ax & 0x7FFFFFu) | 0x800000u;
  const std::uint32_t shift = 126u - e;  // 14 .. 24
  const std::uint32_t q = m >> shift;
  const std::uint32_t rem = m & ((1u << shift) - 1u);
  const std::uint32_t half = 1u << (shift - 1u);
  const std::uint32_t up = (rem > half || (rem == half && (q & 1u))) ? 1u : 0u;
  return static_cast<std::uint16_t>(sign | (q + up));
}

GRADCODEC_HD float f16_to_f32(std::uint16_t h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  const std::uint32_t e = (h >> 10) & 0x1Fu;
  std::uint32_t m = h & 0x3FFu;
  if (e == 0x1Fu) return bits_float(sign | 0x7F800000u | (m << 13));
  if (e != 0) return bits_float(sign | ((e + 112u) << 23) | (m << 13));
  if (m == 0) return bits_float(sign);
  // Subnormal: normalise.
  std::uint32_t exp = 113u;
  while ((m & 0x400u) == 0) {
    m <<= 1;
    --exp;
  }
  return bits_float(sign | (exp << 23) | ((m & 0x3FFu) << 13));
}

//! f32 -> bf16, round to nearest even; NaN stays a quiet NaN (never rounds into Inf).
GRADCODEC_HD std::uint16_t f32_to_bf16(float f) {
  const std::uint32_t x = float_bits(f);
  if ((x & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<std::uint16_t>((x >> 16) | 0x40u);
  const std::uint32_t r = x + 0x7FFFu + ((x >> 16) & 1u);
  return static_cast<std::uint16_t>(r >> 16);
}

GRADCODEC_HD float bf16_to_f32(std::uint16_t h) {
  return bits_float(static_cast<std::uint32_t>(h) << 16);
}

}  // namespace gradcodec::blocks
