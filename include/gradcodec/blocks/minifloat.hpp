// SPDX-License-Identifier: Apache-2.0
//! @file
//! The element formats of the block-scaled codecs (docs/codecs.md "Block-scaled codecs"):
//! OCP FP8 E4M3 and E5M2, FP6 E3M2 and E2M3, FP4 E2M1, and MX INT8 (two's complement
//! times 2^-6). One rule converts an f32 to any of them, in integer steps after one exact
//! power-of-two multiply, so every backend writes the same codes whatever conversion
//! instructions its hardware has.
#pragma once

#include <cstdint>

#include "gradcodec/blocks/config.hpp"
#include "gradcodec/blocks/fmath.hpp"
#include "gradcodec/format.hpp"

namespace gradcodec::blocks {

//! The shape of one element format. Floating formats: `mantissa` bits, exponent bias
//! `bias`, smallest normal exponent emin = 1 - bias; `max_code` is the magnitude code of
//! the largest finite value (the encoder saturates there), `emax` its exponent. INT8:
//! magnitudes k * 2^-6, k <= 127.
struct minifloat {
  std::uint32_t bits;      //!< code width, sign included
  std::uint32_t mantissa;  //!< 0 for int8
  int bias;
  int emax;
  std::uint32_t max_code;  //!< largest finite magnitude code
  bool integer;

  GRADCODEC_HD constexpr int emin() const { return 1 - bias; }
  GRADCODEC_HD constexpr std::uint32_t sign_bit() const { return 1u << (bits - 1); }
};

GRADCODEC_HD constexpr minifloat minifloat_of(element_format f) {
  switch (f) {
    case element_format::e4m3: return {8, 3, 7, 8, 0x7E, false};    // 448
    case element_format::e5m2: return {8, 2, 15, 15, 0x7B, false};  // 57344
    case element_format::e3m2: return {6, 2, 3, 4, 0x1F, false};    // 28
    case element_format::e2m3: return {6, 3, 1, 2, 0x1F, false};    // 7.5
    case element_format::e2m1: return {4, 1, 1, 2, 0x7, false};     // 6
    case element_format::int8: return {8, 0, 0, 0, 127, true};      // 127/64
  }
  return {8, 3, 7, 8, 0x7E, false};
}

//! 2^k as an f32 for -149 <= k <= 127 (a subnormal below -126): exact.
GRADCODEC_HD_INLINE float pow2f(int k) {
  if (k >= -126) return bits_float(static_cast<std::uint32_t>(k + 127) << 23);
  return bits_float(1u << (k + 149));
}

//! The unbiased exponent floor(log2 a) of a normal positive f32 (a subnormal gives -127).
GRADCODEC_HD_INLINE int exponent_of(float a) {
  return static_cast<int>((float_bits(a) >> 23) & 0xFFu) - 127;
}

//! The magnitude code of a = |r| (finite, a >= 0): with t = a / 2^(max(e, emin) - m) (an
//! exact power-of-two multiply, e = floor(log2 a)), l = t rounded to an integer (nearest
//! even, or floor(t) + [u < t - floor(t)]), the code is ((max(e, emin) - emin) << m) + l,
//! which carries into the next binade when l reaches 2^(m+1); then min(code, max_code).
//! INT8: l from t = a * 64, at most 127.
GRADCODEC_HD_INLINE std::uint32_t magnitude_code(const minifloat& f, float a, bool stochastic,
                                                 float u) {
  // The only branches test the format and the rounding, which are the same for a whole
  // block, so a loop over a block's elements can vectorize.
  int shift;  // code = (shift << m) + l
  float t;
  if (f.integer) {
    shift = 0;
    t = fmul(a, 64.0f);
    t = t < 256.0f ? t : 256.0f;  // saturates below; keeps the float-to-int cast in range
  } else {
    const int e = exponent_of(a);
    const int base = e > f.emin() ? e : f.emin();
    shift = base - f.emin();
    // 2^(m - base) is a normal f32 (base <= 127). Past the largest binade, t still lies in
    // [2^m, 2^(m+1)) and the code lands above max_code: the min below saturates it.
    t = fmul(
        a, bits_float(static_cast<std::uint32_t>(static_cast<int>(f.mantissa) - base + 127) << 23));
  }
  std::uint32_t l;
  if (stochastic) {
    const float fl = ffloor(t);
    l = static_cast<std::uint32_t>(fl) + (u < fsub(t, fl) ? 1u : 0u);
  } else {
    // t < 2^23: adding and removing 2^23 rounds it to an integer, ties to even.
    l = static_cast<std::uint32_t>(fsub(fadd(t, 0x1p23f), 0x1p23f));
  }
  const std::uint32_t code = (static_cast<std::uint32_t>(shift) << f.mantissa) + l;
  return code < f.max_code ? code : f.max_code;
}

//! The code of a finite r: its magnitude code, with the sign bit (floating formats) or
//! negated in two's complement (int8) when r < 0 and the magnitude code is not 0. A zero
//! magnitude is always code 0 (+0).
GRADCODEC_HD_INLINE std::uint32_t element_code(const minifloat& f, float r, bool stochastic,
                                               float u) {
  const bool negative = (float_bits(r) >> 31) != 0;
  const std::uint32_t mag = magnitude_code(f, fabs_bits(r), stochastic, u);
  const std::uint32_t with_sign = f.integer ? (0u - mag) & 0xFFu : mag | f.sign_bit();
  return negative && mag != 0 ? with_sign : mag;
}

//! The f32 value of any code of the format (exact): e4m3's S.1111.111 is NaN, e5m2's
//! exponent 31 is Inf or NaN, int8 code 0x80 is -2.
GRADCODEC_HD_INLINE float element_value(const minifloat& f, std::uint32_t code) {
  if (f.integer) {
    const int k = static_cast<int>(code & 0xFFu) - ((code & 0x80u) ? 256 : 0);
    return fmul(static_cast<float>(k), 0x1p-6f);
  }
  const std::uint32_t mag = code & (f.sign_bit() - 1u);
  const bool negative = (code & f.sign_bit()) != 0;
  const std::uint32_t efield = mag >> f.mantissa;
  const std::uint32_t m = mag & ((1u << f.mantissa) - 1u);
  const std::uint32_t all_ones = (f.sign_bit() - 1u) >> f.mantissa;
  float v;
  if (f.bits == 8 && f.mantissa == 3 && mag == 0x7Fu) {
    v = canonical_nan();  // e4m3: no infinities, one NaN per sign
  } else if (f.bits == 8 && f.mantissa == 2 && efield == all_ones) {
    v = m == 0 ? bits_float(0x7F800000u) : canonical_nan();  // e5m2: IEEE-like
  } else if (efield == 0) {
    v = fmul(static_cast<float>(m), pow2f(f.emin() - static_cast<int>(f.mantissa)));
  } else {
    const int e = static_cast<int>(efield) - f.bias;
    v = fmul(static_cast<float>((1u << f.mantissa) | m), pow2f(e - static_cast<int>(f.mantissa)));
  }
  return negative ? bits_float(float_bits(v) ^ 0x80000000u) : v;
}

}  // namespace gradcodec::blocks
