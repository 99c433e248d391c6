// SPDX-License-Identifier: Apache-2.0
//! @file
//! The block-scaled codecs (mxfp8, mxfp6, mxfp4, mxint8, nvfp4, fp8row; docs/codecs.md
//! "Block-scaled codecs") on the CPU: tasks of whole blocks in parallel. Blocks whose
//! chunks of 16 codes start on a byte go through the 16 lanes (blocks/minifloat.hpp's
//! conversion and blocks/block_scaled.hpp's scales and rotation lane by lane: the same IEEE
//! operations), sixteen full blocks at a time where their scales are one byte; other blocks,
//! and a block's last partial chunk, through the scalar per-block rules. Either way the
//! bytes equal the reference's by construction. Error feedback is fused.

//! Blocks per task: about stream_grain elements, and a multiple of 4 blocks so that no two
//! tasks write one byte of the code stream (4 blocks of even-width codes end on a byte).
inline std::uint64_t block_scaled_blocks_per_task(std::uint64_t group) {
  const std::uint64_t per = std::max<std::uint64_t>(1, stream_grain / group);
  return blocks::ceil_div(per, 4) * 4;
}

//! Calls fn(load) with load(i) reading input i as f32: a plain load for f32 inputs, so the
//! per-element work has no dtype switch.
template <class Fn>
inline void block_scaled_with_input(const_tensor_view in, Fn&& fn) {
  if (in.type == dtype::f32)
    fn(f32_load{static_cast<const float*>(in.data)});
  else
    fn(any_load{in.data, in.type});
}

//! Writes the codes of elements [begin, begin + len) into the zeroed stream: whole bytes
//! for 8-bit codes and byte-aligned pairs of 4-bit ones, else code by code.
inline void block_scaled_put_codes(std::uint8_t* stream, std::uint64_t begin, std::uint64_t len,
                                   std::uint32_t bits, const std::uint32_t* codes) {
  if (bits == 8) {
    for (std::uint64_t j = 0; j < len; ++j) stream[begin + j] = static_cast<std::uint8_t>(codes[j]);
    return;
  }
  std::uint64_t j = 0;
  if (bits == 4 && begin % 2 == 0)
    for (; j + 1 < len; j += 2)
      stream[(begin + j) / 2] = static_cast<std::uint8_t>(codes[j] | (codes[j + 1] << 4));
  for (; j < len; ++j) blocks::put_code(stream, begin + j, bits, codes[j]);
}

// ---- 16 lanes (unrotated blocks) ------------------------------------------------------

//! Whether the blocks go through the lanes: every block's chunks of 16 codes start on a
//! byte (so pack16 / unpack16 apply): 8-bit codes, or blocks of a multiple of 16 elements,
//! rotated or not.
inline bool block_scaled_lanes(const blocks::block_rule& r, std::uint64_t group) {
  return r.element.bits == 8 || group % 16 == 0;
}

//! Calls fn.template operator()<F>() for the element format f: the decode's conversions
//! then see the format's fields as constants (no run-time shifts or format tests in the
//! loop). The encodes stay per code width: their conversion is not the bottleneck, and
//! six formats times their dtype pairs would double the unit's compile time.
template <class Fn>
inline void block_scaled_with_format(element_format f, Fn&& fn) {
  switch (f) {
    case element_format::e4m3: fn.template operator()<element_format::e4m3>(); break;
    case element_format::e5m2: fn.template operator()<element_format::e5m2>(); break;
    case element_format::e3m2: fn.template operator()<element_format::e3m2>(); break;
    case element_format::e2m3: fn.template operator()<element_format::e2m3>(); break;
    case element_format::e2m1: fn.template operator()<element_format::e2m1>(); break;
    case element_format::int8: fn.template operator()<element_format::int8>(); break;
  }
}

//! Calls fn.template operator()<Bits>() for the code width of every element format.
template <class Fn>
inline void block_scaled_with_bits(std::uint32_t bits, Fn&& fn) {
  switch (bits) {
    case 4: fn.template operator()<4>(); break;
    case 6: fn.template operator()<6>(); break;
    default: fn.template operator()<8>(); break;
  }
}

//! blocks::element_code for 16 finite inputs r (u: the uniforms of stochastic rounding).
template <bool Stochastic>
GRADCODEC_VINLINE vu16 block_scaled_codes(blocks::minifloat f, vf16 r, vf16 u) {
  const vu16 rbits = vbits(r);
  const vu16 abits = rbits & vset1u(0x7FFFFFFFu);
  const vf16 a = vfrombits(abits);
  vu16 shift;
  vf16 t;
  if (f.integer) {
    shift = vset1u(0);
    t = vmin(a * vset1(64.0f), vset1(256.0f));
  } else {
    // Biased exponents: base = max(e, emin) + 127, t = a * 2^(m - base + 127).
    const auto emin = static_cast<std::uint32_t>(f.emin() + 127);
    const vu16 base = vmaxu(vshr(abits, 23), vset1u(emin));
    shift = base - vset1u(emin);
    t = a * vfrombits(vshl(vset1u(f.mantissa + 254u) - base, 23));
  }
  vu16 l;
  if constexpr (Stochastic) {
    const vf16 fl = vfloor(t);
    l = vtrunc_u(fl) - vlt_bits(u, t - fl);  // all ones (-1) where u < t - fl
  } else {
    l = vtrunc_u((t + vset1(0x1p23f)) - vset1(0x1p23f));
  }
  const vu16 mag = vminu(vshl(shift, f.mantissa) + l, vset1u(f.max_code));
  // All ones where r < 0 and the magnitude code is not 0.
  const vu16 neg = (vset1u(0) - vshr(rbits, 31)) & vneu_bits(mag, 0);
  if (f.integer) return ((mag ^ neg) - neg) & vset1u(0xFFu);
  return mag | (neg & vset1u(f.sign_bit()));
}

//! blocks::element_value of 16 codes: normal floating codes shift into an f32's fields and
//! rebias, subnormal ones are m * 2^(emin - mantissa), int8 is k * 2^-6.
GRADCODEC_VINLINE vf16 block_scaled_values(blocks::minifloat f, vu16 code) {
  if (f.integer) {
    const vu16 neg = vset1u(0) - vshr(code & vset1u(0x80u), 7);
    const vu16 mag = code + (neg & (vset1u(256) - (code + code)));  // 256 - code if negative
    return vfrombits(vbits(vto_f(mag) * vset1(0x1p-6f)) | (neg & vset1u(0x80000000u)));
  }
  const std::uint32_t m = f.mantissa;
  const vu16 mag = code & vset1u(f.sign_bit() - 1u);
  const vu16 efield = vshr(mag, m);
  const vf16 normal =
      vfrombits(vshl(mag, 23 - m) + vset1u(static_cast<std::uint32_t>(127 - f.bias) << 23));
  const vf16 sub =
      vto_f(mag & vset1u((1u << m) - 1u)) * vset1(blocks::pow2f(f.emin() - static_cast<int>(m)));
  vu16 v = vbits(vselect_bits(vequ_bits(efield, 0), sub, normal));
  if (f.bits == 8 && m == 3) {  // e4m3: S.1111.111 is NaN
    v = vbits(vselect_bits(vequ_bits(mag, 0x7Fu), vfrombits(vset1u(detail::canonical_nan_bits)),
                           vfrombits(v)));
  } else if (f.bits == 8 && m == 2) {  // e5m2: exponent 31 is Inf (m = 0) or NaN
    const vu16 special =
        vset1u(0x7F800000u) | (vneu_bits(mag & vset1u(3u), 0) & vset1u(detail::canonical_nan_bits));
    v = vbits(vselect_bits(vequ_bits(efield, 31), vfrombits(special), vfrombits(v)));
  }
  return vfrombits(v | vshl(code & vset1u(f.sign_bit()), 32 - f.bits));
}

//! element_value of 16 codes of a format of Bits < 8 bits (exact): 4-bit codes from the
//! 16-entry table; 6-bit ones from the 64-entry table by two 32-entry permutes on AVX-512;
//! the others computed (a 64-entry lookup by permutes of 8 entries, or gathers, costs more
//! than the arithmetic).
template <unsigned Bits>
GRADCODEC_VINLINE vf16 block_scaled_code_values(blocks::minifloat f, const float* table,
                                                vu16 code) {
  if constexpr (Bits == 4) return vlookup16(table, code);
#if GRADCODEC_CPU_LEVEL == 2
  if constexpr (Bits == 6) {
    const __m512 lo =
        _mm512_permutex2var_ps(_mm512_loadu_ps(table), code.v, _mm512_loadu_ps(table + 16));
    const __m512 hi =
        _mm512_permutex2var_ps(_mm512_loadu_ps(table + 32), code.v, _mm512_loadu_ps(table + 48));
    return {_mm512_mask_blend_ps(_mm512_test_epi32_mask(code.v, _mm512_set1_epi32(32)), lo, hi)};
  }
#endif
  return block_scaled_values(f, code);
}

//! Decoded byte codes (e4m3, e5m2, int8) times a block's dec, in few steps: a scaled value
//! v * 2^-shift that is exact for every code, times dec * 2^shift folded into one
//! multiplier where that product is exact, else times 2^shift and then dec (two roundings
//! of which the first is exact, so the same value). fp8 goes through binary16, whose
//! conversion is exact and ignores DAZ: an e5m2 code is a binary16's top byte; e4m3's
//! fields shifted into binary16's are its value times 2^-8 (subnormals included), with
//! S.1111.111 selected to NaN. int8 is k = v * 2^6 from the byte as signed.
template <element_format F>
struct block_scaled_byte_decoder {
  static constexpr bool e4m3 = F == element_format::e4m3, e5m2 = F == element_format::e5m2;
  static constexpr int shift = e4m3 ? 8 : e5m2 ? 0 : -6;
  vf16 mul, mul_rest;  //!< x = scaled * mul * mul_rest, mul_rest 1 where dec * 2^shift is exact
  //! mul_rest is 1 and dec finite, for e4m3 or int8: x = scaled * mul, whose only NaN is
  //! e4m3's canonical one
  bool plain;

  GRADCODEC_VINLINE explicit block_scaled_byte_decoder(float dec) {
    const float folded = dec * blocks::pow2f(shift);
    const bool exact = e5m2 || folded * blocks::pow2f(-shift) == dec;
    mul = vset1(exact ? folded : blocks::pow2f(shift));
    mul_rest = vset1(exact ? 1.0f : dec);
    plain = !e5m2 && exact && std::isfinite(dec);
  }

  GRADCODEC_VINLINE static vf16 scaled(vu16 code) {
    if constexpr (e5m2) return vhalf_to_f(vshl(code, 8));
    if constexpr (!e4m3) return vto_f(code ^ vset1u(0x80u)) - vset1(128.0f);
    const vu16 h = (vshl(code, 8) & vset1u(0x8000u)) | (vshl(code, 7) & vset1u(0x3F80u));
    return vhalf_to_f(vselectu(vequ(code | vset1u(0x80u), vset1u(0xFFu)), vset1u(0x7E00u), h));
  }
  //! scaled() of the 16 byte codes at p. fp8 builds the binary16 bits on 16-bit lanes from
  //! the sign-extended byte (half the work of 32-bit lanes on AVX2): e5m2's is its top
  //! byte; e4m3's is (b << 7) with bit 14 (a copy of the sign) cleared, NaN where the low
  //! 7 bits are all ones. AVX-512 keeps the 32-bit route for e5m2, measured faster there.
  GRADCODEC_VINLINE static vf16 scaled_bytes(const std::uint8_t* p) {
    if constexpr (!e4m3 && (!e5m2 || GRADCODEC_CPU_LEVEL == 2))
      return scaled(unpack16<8>(reinterpret_cast<const std::byte*>(p)));
    const vh16 b = vload_i8_h(p);
    if constexpr (e5m2) return vhalf_to_f(vshl(b, 8));
    return vhalf_to_f(vselect_eqh(b | vset1h(0xFF80u), vset1h(0xFFFFu), vset1h(0x7E00u),
                                  vshl(b, 7) & vset1h(0xBF80u)));
  }
  GRADCODEC_VINLINE vf16 operator()(vu16 code) const { return multiplied(scaled(code)); }
  //! operator() of the 16 byte codes at p.
  GRADCODEC_VINLINE vf16 bytes(const std::uint8_t* p) const { return multiplied(scaled_bytes(p)); }

 private:
  GRADCODEC_VINLINE vf16 multiplied(vf16 v) const { return e5m2 ? v * mul : v * mul * mul_rest; }
};

//! Uniforms of the rounding stream drawn ahead in windows, for chunks of 16 from any index.
struct block_scaled_uniforms {
  static constexpr std::uint64_t window = 1024;  // a multiple of 16 * philox_uniform_step
  const philox16_gen& gen;
  std::uint64_t base = ~std::uint64_t{0};
  alignas(64) float u[window];

  explicit block_scaled_uniforms(const philox16_gen& g) : gen(g) {}

  //! u for elements i .. i + 15.
  vf16 at(std::uint64_t i) {
    if (i < base || i + 16 > base + window) {
      base = i & ~std::uint64_t{3};  // philox_uniforms starts on a multiple of 4
      philox_uniforms(gen, base, window / 16, u);
    }
    return vload(u + (i - base));
  }
};

//! The nearest-even codes of 16 finite inputs r of a floating format of Bits bits with M
//! mantissa bits: the values of block_scaled_codes<false>, by fewer steps. At or above 2^emin,
//! the f32's significand is rounded to M bits in integer steps (ties to even, carrying into
//! the exponent) and its exponent rebiased; below, adding 2^(emin - M + 23) rounds a to a
//! multiple of 2^(emin - M), the sum's low bits then being the subnormal code (2^M, the
//! first normal code, when it rounds up).
template <unsigned Bits, unsigned M>
struct block_scaled_nearest_coder {
  static constexpr element_format format =
      Bits == 8   ? (M == 3 ? element_format::e4m3 : element_format::e5m2)
      : Bits == 6 ? (M == 2 ? element_format::e3m2 : element_format::e2m3)
                  : element_format::e2m1;
  vu16 round_rebias;  //!< (2^(22 - M) - 1) - ((127 - bias) << 23), wrapping
  vu16 min_normal;    //!< the bits of 2^emin
  vu16 max_code;
  vf16 magic;   //!< 2^(emin - M + 23)
  vu16 rebias;  //!< (127 - bias) << 23
  vf16 max_value;

  GRADCODEC_VINLINE explicit block_scaled_nearest_coder(const blocks::minifloat& f)
      : round_rebias(
            vset1u(((1u << (22 - M)) - 1u) - (static_cast<std::uint32_t>(127 - f.bias) << 23))),
        min_normal(vset1u(static_cast<std::uint32_t>(f.emin() + 127) << 23)),
        max_code(vset1u(f.max_code)),
        magic(vset1(blocks::pow2f(f.emin() - static_cast<int>(M) + 23))),
        rebias(vset1u(static_cast<std::uint32_t>(127 - f.bias) << 23)),
        max_value(vset1(blocks::element_value(f, f.max_code))) {}

  //! The codes of operator() and, in value, each code's element_value (+0 for code 0): the
  //! rounded f32 or subnormal sum the code was read from, saturated like the code. Cheaper
  //! than decoding the codes again where no table holds their values (8 bits).
  GRADCODEC_VINLINE vu16 codes_values(vf16 r, vf16& value) const {
    const vu16 rbits = vbits(r);
    const vu16 abits = rbits & vset1u(0x7FFFFFFFu);
    const vu16 rounded = abits + vset1u((1u << (22 - M)) - 1u) + (vshr(abits, 23 - M) & vset1u(1u));
    const vf16 sum = vfrombits(abits) + magic;
    const vu16 code =
        vsign_magnitude<Bits>(magnitude(abits, vshr(rounded - rebias, 23 - M), sum), rbits);
    const vf16 a = vmin(vfrombits(vselect_lts(abits, min_normal, vbits(sum - magic),
                                              rounded & vset1u(~((1u << (23 - M)) - 1u)))),
                        max_value);
    value = vfrombits(vbits(a) | (vshl(code, 32 - Bits) & vset1u(0x80000000u)));
    return code;
  }

  GRADCODEC_VINLINE vu16 operator()(vf16 r, std::uint64_t) const {
    const vu16 rbits = vbits(r);
    const vu16 abits = rbits & vset1u(0x7FFFFFFFu);
    const vu16 normal = vshr(abits + round_rebias + (vshr(abits, 23 - M) & vset1u(1u)), 23 - M);
    return vsign_magnitude<Bits>(magnitude(abits, normal, vfrombits(abits) + magic), rbits);
  }

 private:
  //! The saturated magnitude code of |r| (bits abits, below 2^31 like min_normal, so the
  //! compare may be AVX2's signed one): `normal` (its significand rounded and exponent
  //! rebiased) from 2^emin up, below it the low bits of sum = |r| + magic.
  GRADCODEC_VINLINE vu16 magnitude(vu16 abits, vu16 normal, vf16 sum) const {
    return vminu(vselect_lts(abits, min_normal, vbits(sum) - vbits(magic), normal), max_code);
  }
};

//! The nearest-even codes of 16 finite inputs r of MX INT8: the values of
//! block_scaled_codes<false>, with t = min(|r| * 64, 256) < 2^23 rounded by adding 2^23,
//! whose low bits are then the integer.
struct block_scaled_int8_coder {
  static constexpr element_format format = element_format::int8;
  GRADCODEC_VINLINE vu16 operator()(vf16 r, std::uint64_t) const {
    const vf16 t = vmin(vabs(r) * vset1(64.0f), vset1(256.0f));
    const vu16 mag = vminu(vbits(t + vset1(0x1p23f)) - vbits(vset1(0x1p23f)), vset1u(127));
    const vu16 neg = vset1u(0) - vshr(vbits(r), 31);  // all ones where r < 0
    return ((mag ^ neg) - neg) & vset1u(0xFFu);
  }
};

//! Codes of 16 finite inputs by the general rule: any format, either rounding (i: the
//! first input's index, for the uniforms).
template <bool Stochastic>
struct block_scaled_coder {
  blocks::minifloat f;
  block_scaled_uniforms* uniforms;

  GRADCODEC_VINLINE vu16 operator()(vf16 r, std::uint64_t i) const {
    return block_scaled_codes<Stochastic>(f, r, Stochastic ? uniforms->at(i) : vzero());
  }
};

//! The element format a coder is fixed to (block_scaled_coder, any format: e4m3, unused).
template <class Coder>
constexpr element_format block_scaled_coder_format() {
  if constexpr (requires { Coder::format; })
    return Coder::format;
  else
    return element_format::e4m3;
}

//! Whether an encode's residual takes the values of Bits-bit codes from the coder (8 bits,
//! where no table holds them) rather than decoding the codes.
template <unsigned Bits, class Coder>
inline constexpr bool block_scaled_coder_values = Bits == 8 &&
                                                  requires(const Coder& c, vf16 r, vf16& x) {
  c.codes_values(r, x);
};

//! Calls fn(coder) with the coder of format f: nearest-even rounding takes
//! block_scaled_nearest_coder (floating formats, whose shifts are then constants) or
//! block_scaled_int8_coder, stochastic rounding the general rule.
template <unsigned Bits, bool Stochastic, class Fn>
GRADCODEC_VINLINE void block_scaled_with_coder(const blocks::minifloat& f,
                                               block_scaled_uniforms& uniforms, Fn&& fn) {
  if constexpr (!Stochastic) {
    if constexpr (Bits == 4) {
      return fn(block_scaled_nearest_coder<4, 1>(f));  // e2m1
    } else {
      if (f.mantissa == 2) return fn(block_scaled_nearest_coder<Bits, 2>(f));
      if constexpr (Bits == 6) return fn(block_scaled_nearest_coder<6, 3>(f));
      if (f.mantissa == 3) return fn(block_scaled_nearest_coder<Bits, 3>(f));
      if constexpr (Bits == 8) return fn(block_scaled_int8_coder{});
    }
  }
  if constexpr (Stochastic) fn(block_scaled_coder<Stochastic>{f, &uniforms});
}

//! Zeroes the code bytes of elements [begin, begin + len), begin's code starting on a byte.
inline void block_scaled_zero_codes(std::uint8_t* stream, std::uint64_t begin, std::uint64_t len,
                                    std::uint32_t bits) {
  const std::uint64_t first = begin * bits / 8;
  std::memset(stream + first, 0, blocks::ceil_div((begin + len) * bits, 8) - first);
}

// ---- Rotation on 16 lanes --------------------------------------------------------------
// blocks/block_scaled.hpp's rotation of pieces of 16 * 2^k: the same flips, multiplies and
// butterflies. Stages h < 16 stay inside a vector, so running them vector by vector before
// the wider stages computes every value from the same operands.

inline constexpr std::uint32_t block_scaled_lane_index[16] = {0, 1, 2,  3,  4,  5,  6,  7,
                                                              8, 9, 10, 11, 12, 13, 14, 15};

//! The rotation stream's numbers, 16 at a time: number k holds the flips of elements
//! 32k .. 32k + 31 (blocks::rotation_flip).
struct block_scaled_flips {
  const philox16_gen& gen;
  std::uint64_t base = ~std::uint64_t{0};
  std::uint32_t words[16];

  explicit block_scaled_flips(const philox16_gen& g) : gen(g) {}

  //! Bit j set where element i + j is negated (j < 32), for any i.
  std::uint32_t word(std::uint64_t i) {
    const std::uint64_t k = i >> 5;
    if (k < base || k + 1 >= base + 16) {
      base = k & ~std::uint64_t{3};  // philox16 starts on a multiple of 4
      vstore_u(words, philox16(gen, base));
    }
    const std::uint64_t two = words[k - base] | (std::uint64_t{words[k + 1 - base]} << 32);
    return static_cast<std::uint32_t>(two >> (i & 31u));
  }
  //! sign[k]: the sign bit of lane j set where element i + 16 k + j is negated, one word
  //! per two vectors.
  template <unsigned C>
  GRADCODEC_VINLINE void run_signs(std::uint64_t i, vu16 (&sign)[C]) {
    for (unsigned k = 0; k < C; k += 2) {
      const std::uint32_t bits = word(i + 16 * k);
      sign[k] = vsign_bits(bits);
      if (k + 1 < C) sign[k + 1] = vsign_bits(bits >> 16);
    }
  }
};

//! One butterfly stage h = H inside a vector: (a, b) -> (a + b, a - b), as one fused
//! multiply-add per lane, w * (+-1) + other: w * (+-1) is exact, so the sum rounds once to
//! the same value as the add or subtract (zeros' signs included).
template <unsigned H>
GRADCODEC_VINLINE vf16 block_scaled_butterfly(vf16 w) {
  alignas(64) static constexpr float sign[16] = {
      (0 & H) ? -1.0f : 1.0f,  (1 & H) ? -1.0f : 1.0f,  (2 & H) ? -1.0f : 1.0f,
      (3 & H) ? -1.0f : 1.0f,  (4 & H) ? -1.0f : 1.0f,  (5 & H) ? -1.0f : 1.0f,
      (6 & H) ? -1.0f : 1.0f,  (7 & H) ? -1.0f : 1.0f,  (8 & H) ? -1.0f : 1.0f,
      (9 & H) ? -1.0f : 1.0f,  (10 & H) ? -1.0f : 1.0f, (11 & H) ? -1.0f : 1.0f,
      (12 & H) ? -1.0f : 1.0f, (13 & H) ? -1.0f : 1.0f, (14 & H) ? -1.0f : 1.0f,
      (15 & H) ? -1.0f : 1.0f};
  return vfma(w, vload(sign), vswap_lanes<H>(w));
}

//! Calls fn(std::integral_constant<unsigned, k>{}) for k = 0 .. N - 1: array indices that
//! are constants let the compiler keep a piece's vectors in registers (a loop, not
//! unrolled at -O2, leaves them on the stack).
template <unsigned N, class Fn>
GRADCODEC_VINLINE void block_scaled_unrolled(Fn&& fn) {
  [&]<unsigned... K>(std::integer_sequence<unsigned, K...>) GRADCODEC_VLAMBDA {
    (fn(std::integral_constant<unsigned, K>{}), ...);
  }
  (std::make_integer_sequence<unsigned, N>{});
}

//! blocks::hadamard of each piece of V vectors (16 V values) in v: the stages inside each
//! vector, then h = 1, 2, ... V / 2 vectors apart.
template <unsigned V, unsigned C>
GRADCODEC_VINLINE void block_scaled_hadamard(vf16 (&v)[C]) {
  block_scaled_unrolled<C>([&](auto k) GRADCODEC_VLAMBDA {
    v[k] = block_scaled_butterfly<8>(
        block_scaled_butterfly<4>(block_scaled_butterfly<2>(block_scaled_butterfly<1>(v[k]))));
  });
  block_scaled_unrolled<std::countr_zero(V)>([&](auto stage) GRADCODEC_VLAMBDA {
    constexpr unsigned h = 1u << stage;
    block_scaled_unrolled<C>([&](auto j) GRADCODEC_VLAMBDA {
      if constexpr ((j & h) == 0) {
        const vf16 a = v[j], b = v[j + h];
        v[j] = a + b;
        v[j + h] = a - b;
      }
    });
  });
}

//! Encode side of the pieces of 16 V values whose vector k is load(k), first element
//! `first`: each becomes H (D v / m), C vectors at a time in registers (C a multiple of V,
//! so C / V pieces' butterfly chains overlap), vector k stored at w + 16 k; piece_max[k]
//! gets the lane-wise largest |w| bits of piece k.
template <unsigned V, unsigned C = V, class Load>
GRADCODEC_VINLINE void block_scaled_rotate_vectors(const Load& load, float* w, std::uint64_t first,
                                                   unsigned vectors, block_scaled_flips& flips,
                                                   vu16* piece_max) {
  const vf16 inv = vset1(blocks::pow2f(-std::countr_zero(16 * V)));
  for (unsigned c = 0; c < vectors; c += C) {
    vf16 v[C];
    vu16 sign[C];
    flips.run_signs(first + 16 * c, sign);
    block_scaled_unrolled<C>(
        [&](auto k) GRADCODEC_VLAMBDA { v[k] = vfrombits(vbits(load(c + k)) ^ sign[k]) * inv; });
    block_scaled_hadamard<V>(v);
    block_scaled_unrolled<C>([&](auto k) GRADCODEC_VLAMBDA { vstore(w + 16 * (c + k), v[k]); });
    block_scaled_unrolled<C / V>([&](auto piece) GRADCODEC_VLAMBDA {
      vu16 a = vset1u(0);
      block_scaled_unrolled<V>(
          [&](auto k) GRADCODEC_VLAMBDA { a = vmaxu(a, vbits(vabs(v[piece * V + k]))); });
      piece_max[c / V + piece] = a;
    });
  }
}
//! Decode side: v = D H w for every piece.
template <unsigned V, unsigned C = V>
GRADCODEC_VINLINE void block_scaled_unrotate_pieces(float* w, std::uint64_t first, unsigned vectors,
                                                    block_scaled_flips& flips) {
  for (unsigned c = 0; c < vectors; c += C) {
    vf16 v[C];
    block_scaled_unrolled<C>([&](auto k) GRADCODEC_VLAMBDA { v[k] = vload(w + 16 * (c + k)); });
    block_scaled_hadamard<V>(v);
    vu16 sign[C];
    flips.run_signs(first + 16 * c, sign);
    block_scaled_unrolled<C>([&](auto k) GRADCODEC_VLAMBDA {
      vstore(w + 16 * (c + k), vfrombits(vbits(v[k]) ^ sign[k]));
    });
  }
}

//! Calls fn.template operator()<V>() for a piece of m = 16 V elements (16 .. 256).
template <class Fn>
GRADCODEC_VINLINE auto block_scaled_with_piece(std::uint32_t m, Fn&& fn) {
  switch (m) {
    case 16: return fn.template operator()<1>();
    case 32: return fn.template operator()<2>();
    case 64: return fn.template operator()<4>();
    case 128: return fn.template operator()<8>();
    default: return fn.template operator()<16>();
  }
}

//! Calls fn(off, m) for the pieces of a rotated block of len elements: m = 16 * 2^k
//! (blocks::rotation_piece) while 16 or more are left, then once for the rest (m < 16,
//! rotated as its own pieces of 8, 4, 2 and 1 by the scalar steps).
template <class Fn>
GRADCODEC_VINLINE void block_scaled_for_each_piece(std::uint64_t len, Fn&& fn) {
  for (std::uint64_t off = 0; off < len;) {
    const std::uint32_t m =
        len - off < 16 ? static_cast<std::uint32_t>(len - off) : blocks::rotation_piece(len - off);
    fn(off, m);
    off += m;
  }
}

//! The flips of a rest of fewer than 16 elements from a flip word: bit j for element j.
struct block_scaled_word_flips {
  std::uint32_t word;
  bool operator()(std::uint32_t j) const { return ((word >> j) & 1u) != 0; }
};

//! Encode side of one piece in w, its first element `first`: w = H (D v / m); returns the
//! bits of the largest |w|. A rest of fewer than 16 elements is rotated by the blocks' steps
//! as pieces of 8, 4, 2 and 1, its flips from the lanes' words.
inline vu16 block_scaled_rotate_piece(float* w, std::uint64_t first, std::uint32_t m,
                                      block_scaled_flips& flips) {
  vu16 a = vset1u(0);
  if (m >= 16) {
    block_scaled_with_piece(m, [&]<unsigned V>() GRADCODEC_VLAMBDA {
      block_scaled_rotate_vectors<V>(
          [w](unsigned k) GRADCODEC_VLAMBDA { return vload(w + 16 * k); }, w, first, V, flips, &a);
    });
    return a;
  }
  const std::uint32_t flip = flips.word(first);
  std::uint32_t rest = 0;
  for (std::uint32_t off = 0; off < m;) {
    const std::uint32_t k = blocks::rotation_piece(m - off);
    blocks::rotate_piece(w + off, k, block_scaled_word_flips{flip >> off});
    off += k;
  }
  for (std::uint32_t j = 0; j < m; ++j)
    rest = std::max(rest, blocks::float_bits(w[j]) & 0x7FFFFFFFu);
  return vset1u(rest);
}
//! Decode side: v = D H w.
inline void block_scaled_unrotate_piece(float* w, std::uint64_t first, std::uint32_t m,
                                        block_scaled_flips& flips) {
  if (m >= 16)
    return block_scaled_with_piece(m, [&]<unsigned V>() GRADCODEC_VLAMBDA {
      block_scaled_unrotate_pieces<V>(w, first, V, flips);
    });
  const std::uint32_t flip = flips.word(first);
  for (std::uint32_t off = 0; off < m;) {
    const std::uint32_t k = blocks::rotation_piece(m - off);
    blocks::unrotate_piece(w + off, k, block_scaled_word_flips{flip >> off});
    off += k;
  }
}

// ---- Runs of rotated blocks ------------------------------------------------------------
// Blocks that are one piece each (16 .. 256 elements, a power of two: mxfp8/mxfp4's 32,
// nvfp4's 16) go 256 elements at a time: the run's pieces are rotated together, their
// butterflies independent chains the core overlaps, where block by block each block waited
// on its own chain and its scalar steps.

//! Elements per run.
inline constexpr std::uint32_t block_scaled_run_elements = blocks::max_rotation_piece;

//! Whether rotated blocks of `group` elements go in runs: each block one piece.
inline bool block_scaled_runs(const blocks::block_rule& r, std::uint64_t group) {
  return r.rotate && group >= 16 && group <= block_scaled_run_elements &&
         std::has_single_bit(group);
}
//! Whether blocks [b, b + run / group) are full and in [b, end).
inline bool block_scaled_run_fits(std::uint64_t group, std::uint64_t n, std::uint64_t b,
                                  std::uint64_t end) {
  const std::uint64_t count = block_scaled_run_elements / group;
  return b + count <= end && (b + count) * group <= n;
}

//! Rotates (encode side) the run of elements [first, first + 256) of src into w, pieces of
//! `group`, eight vectors or one piece at a time, and copies the inputs to kept when it is
//! not null; piece_max[k] gets the lane-wise largest |w| bits of piece k. Not forced
//! inline: one copy of the rotation per input type, where one per caller tripled this
//! family's compile time.
template <class Src>
inline void block_scaled_rotate_run(const Src& src, float* kept, float* w, std::uint64_t first,
                                    std::uint32_t group, block_scaled_flips& flips,
                                    vu16* piece_max) {
  block_scaled_with_piece(group, [&]<unsigned V>() GRADCODEC_VLAMBDA {
    block_scaled_rotate_vectors<V, std::max(V, 8u)>(
        [&](unsigned k) GRADCODEC_VLAMBDA {
          const vf16 v = src.load(first + 16 * k);
          if (kept != nullptr) vstore(kept + 16 * k, v);
          return v;
        },
        w, first, block_scaled_run_elements / 16, flips, piece_max);
  });
}
//! Decode side: v = D H w for every piece of the run.
inline void block_scaled_unrotate_run(float* w, std::uint64_t first, std::uint32_t group,
                                      block_scaled_flips& flips) {
  block_scaled_with_piece(group, [&]<unsigned V>() GRADCODEC_VLAMBDA {
    block_scaled_unrotate_pieces<V, std::max(V, 8u)>(w, first, block_scaled_run_elements / 16,
                                                     flips);
  });
}

//! The scan of block k of a rotated run from its piece maximum: a piece that holds NaN or
//! Inf rotates to values that are not finite (every output sums every input), so the
//! rotated maximum tells the inputs' finiteness too.
GRADCODEC_VINLINE blocks::block_scan block_scaled_run_scan(vu16 piece_max) {
  const std::uint32_t amax = vhmaxu(piece_max);
  blocks::block_scan s;
  s.finite = amax < 0x7F800000u;
  if (s.finite) s.amax = blocks::bits_float(amax);
  return s;
}

//! Elements a block scan prefetches ahead of itself, one line per 16 elements into L2: the
//! scan is the only pass that reads from memory, and without it the memory would idle
//! while the cached blocks are converted (the distance quant's bucket scan uses).
inline constexpr std::uint64_t block_scaled_prefetch_ahead = 2048;

//! Encode input of the 16-lane path: v = in[i].
template <dtype T>
struct block_scaled_input {
  const void* data;
  GRADCODEC_VINLINE void prefetch(std::uint64_t i) const { prefetch_element<1>(data, T, i); }
  GRADCODEC_VINLINE void prefetch_next_block(std::uint64_t i) const { prefetch(i); }
  GRADCODEC_VINLINE vf16 load(std::uint64_t i) const { return vload_typed<T>(data, i); }
  GRADCODEC_VINLINE vf16 load_n(std::uint64_t i, unsigned cnt) const {
    return vload_typed_n<T>(data, i, cnt);
  }
  float at(std::uint64_t i) const { return detail::load_value(data, T, i); }
};
//! Error-feedback input: p = g[i] + e[i] in f32, as in the generic composition.
template <dtype G, dtype E>
struct block_scaled_feedback_input {
  const void* g;
  const void* e;
  // No prefetch: ahead of a scan of two streams it measured slower than none (Zen 4).
  GRADCODEC_VINLINE void prefetch(std::uint64_t) const {}
  GRADCODEC_VINLINE void prefetch_next_block(std::uint64_t i) const {
    prefetch_element<1>(g, G, i);
    prefetch_element<1>(e, E, i);
  }
  GRADCODEC_VINLINE vf16 load(std::uint64_t i) const {
    return vadd_nan_first(vload_typed<G>(g, i), vload_typed<E>(e, i));
  }
  GRADCODEC_VINLINE vf16 load_n(std::uint64_t i, unsigned cnt) const {
    return vadd_nan_first(vload_typed_n<G>(g, i, cnt), vload_typed_n<E>(e, i, cnt));
  }
  float at(std::uint64_t i) const {
    return blocks::fadd_nan_first(detail::load_value(g, G, i), detail::load_value(e, E, i));
  }
};
//! Where an encode puts p - decoded(p): nowhere, or the residual of dtype E.
struct block_scaled_no_residual {
  static constexpr bool active = false;
  void store(std::uint64_t, vf16) const {}
  void store_one(std::uint64_t, float) const {}
};
template <dtype E>
struct block_scaled_residual {
  static constexpr bool active = true;
  static constexpr dtype type = E;
  void* data;
  GRADCODEC_VINLINE void store(std::uint64_t i, vf16 x) const { vstore_typed<E>(data, i, x); }
  void store_one(std::uint64_t i, float x) const { detail::store_value(data, E, i, x); }
};

//! The bits of the largest |v| of elements [begin, end): Inf's or above when one is not
//! finite. Src's prefetch runs block_scaled_prefetch_ahead elements ahead.
template <class Src>
GRADCODEC_VINLINE std::uint32_t block_scaled_range_maximum(const Src& src, std::uint64_t begin,
                                                           std::uint64_t end) {
  vu16 m0 = vset1u(0), m1 = vset1u(0);  // two accumulators: no max waits on the one before
  std::uint64_t i = begin;
  for (; i + 32 <= end; i += 32) {
    src.prefetch(i + block_scaled_prefetch_ahead);
    src.prefetch(i + 16 + block_scaled_prefetch_ahead);
    m0 = vmaxu(m0, vbits(vabs(src.load(i))));
    m1 = vmaxu(m1, vbits(vabs(src.load(i + 16))));
  }
  for (; i < end; i += 16)
    m0 = vmaxu(
        m0,
        vbits(vabs(src.load_n(i, static_cast<unsigned>(std::min<std::uint64_t>(16, end - i))))));
  return vhmaxu(vmaxu(m0, m1));
}

//! The block's scan: finite when its largest magnitude's bits are below Inf's.
template <class Src>
GRADCODEC_VINLINE blocks::block_scan block_scaled_scan_lanes(const Src& src, std::uint64_t begin,
                                                             std::uint64_t len) {
  const std::uint32_t amax = block_scaled_range_maximum(src, begin, begin + len);
  blocks::block_scan s;
  s.finite = amax < 0x7F800000u;
  if (s.finite) s.amax = blocks::bits_float(amax);
  return s;
}

//! The codes of elements [begin, begin + len) of one block (len a multiple of 16) under
//! its quantizer q, packed into the stream (zeros when not `send`), and with a residual, p
//! minus the decoded value.
template <unsigned Bits, class Coder, class Src, class Res>
GRADCODEC_VINLINE void block_scaled_code_chunks(blocks::minifloat f, blocks::block_quantizer q,
                                                bool send, const Coder& coder, const Src& src,
                                                const Res& res, const float* values,
                                                std::uint64_t begin, std::uint64_t len,
                                                std::uint8_t* stream) {
  const Src in = src;  // locals: the stores into the stream cannot change them
  const Res out = res;
  const vf16 enc = vset1(q.enc), dec = vset1(q.dec);
  // A byte format's coder knows its format: the residual decodes as block_scaled_decode does.
  constexpr bool bytes = Bits == 8 && requires { Coder::format; };
  using byte_decoder = block_scaled_byte_decoder<block_scaled_coder_format<Coder>()>;
  const byte_decoder decoded(q.dec);
  // A long block (a row) is coded from L2 after its scan, while the memory would idle: the
  // next block is fetched meanwhile.
  const bool fetch_next = len >= block_scaled_prefetch_ahead;
  if constexpr (Res::active && block_scaled_coder_values<Bits, Coder>) {
    if (send) {  // dec is then positive and finite
      for (std::uint64_t j = 0; j < len; j += 16) {
        if (fetch_next) in.prefetch_next_block(begin + len + j);
        const vf16 v = in.load(begin + j);
        vf16 value;
        const vu16 codes = coder.codes_values(v * enc, value);
        pack16<Bits>(reinterpret_cast<std::byte*>(stream) + (begin + j) * Bits / 8, codes);
        out.store(begin + j, v - value * dec);
      }
      return;
    }
  }
  for (std::uint64_t j = 0; j < len; j += 16) {
    if (fetch_next) in.prefetch_next_block(begin + len + j);
    const vf16 v = in.load(begin + j);
    vu16 codes = vset1u(0);
    if (send) codes = coder(v * enc, begin + j);
    pack16<Bits>(reinterpret_cast<std::byte*>(stream) + (begin + j) * Bits / 8, codes);
    if constexpr (Res::active) {
      vf16 x;
      if constexpr (bytes)  // as block_scaled_decode does
        x = decoded.plain ? byte_decoder::scaled(codes) * decoded.mul
                          : vcanonical_nan(decoded(codes));
      else
        x = vcanonical_nan(block_scaled_code_values<Bits>(f, values, codes) * dec);
      out.store(begin + j, v - x);
    }
  }
}

// ---- Sixteen E8M0 blocks at once ---------------------------------------------------------
// Full unrotated blocks of a multiple of 16 elements with power-of-two scales (mxfp8,
// mxfp6, mxfp4, mxint8): the sixteen block maxima are reduced across lanes together and
// the scales computed lane-wise, where one block alone pays a horizontal reduction and
// scalar steps per 32 elements. Same values as e8m0_code and block_quantizer::e8m0.

//! Blocks per batch.
inline constexpr std::uint64_t block_scaled_batch = 16;

//! One level of the transposing reduction: lanes with bit H clear take max(u[l], u[l ^ H]),
//! lanes with it set max(v[l], v[l ^ H]).
template <unsigned H>
GRADCODEC_VINLINE vu16 block_scaled_fold(vu16 u, vu16 v) {
  const vu16 upper = vneu_bits(vload_u(block_scaled_lane_index) & vset1u(H), 0);
  const vf16 fu = vfrombits(u), fv = vfrombits(v);
  return vmaxu(vbits(vselect_bits(upper, vswap_lanes<H>(fv), fu)),
               vbits(vselect_bits(upper, fv, vswap_lanes<H>(fu))));
}
//! Lane j of the result is the largest lane of m[j] (m is overwritten).
GRADCODEC_VINLINE vu16 block_scaled_lane_maxima(vu16* m) {
  for (unsigned j = 0; j < 8; ++j) m[j] = block_scaled_fold<8>(m[j], m[j + 8]);
  for (unsigned j = 0; j < 4; ++j) m[j] = block_scaled_fold<4>(m[j], m[j + 4]);
  for (unsigned j = 0; j < 2; ++j) m[j] = block_scaled_fold<2>(m[j], m[j + 2]);
  return block_scaled_fold<1>(m[0], m[1]);
}

//! Lane j: the bits of the largest |v| of block b0 + j (full blocks of `group` elements),
//! Inf's or above for a non-finite block.
template <class Src>
GRADCODEC_VINLINE vu16 block_scaled_batch_maxima(const Src& src, std::uint64_t b0,
                                                 std::uint64_t group) {
  vu16 m[block_scaled_batch];
  for (std::uint64_t j = 0; j < block_scaled_batch; ++j) {
    vu16 a = vset1u(0);
    for (std::uint64_t k = 0; k < group; k += 16) {
      src.prefetch((b0 + j) * group + k + block_scaled_prefetch_ahead);
      a = vmaxu(a, vbits(vabs(src.load((b0 + j) * group + k))));
    }
    m[j] = a;
  }
  return block_scaled_lane_maxima(m);
}

//! E8M0 scale codes from 16 block maxima (bits of |v|): NaN (255) for a non-finite one.
GRADCODEC_VINLINE vu16 block_scaled_e8m0_codes(vu16 amax, std::uint32_t emax) {
  const vu16 e = vshr(amax, 23);  // biased exponent: 0 for zero and subnormals, 255 non-finite
  const vu16 code = vminu(vmaxu(e, vset1u(emax)) - vset1u(emax), vset1u(254));
  return vbits(
      vselect_bits(vequ_bits(e, 255), vfrombits(vset1u(blocks::e8m0_nan)), vfrombits(code)));
}
//! 2^(127 - code) (enc) or 2^(code - 127) (dec) as f32 bits; 2^-127 is subnormal.
GRADCODEC_VINLINE vu16 block_scaled_e8m0_pow2(vu16 exponent_field) {
  return vbits(vselect_bits(vequ_bits(exponent_field, 0), vfrombits(vset1u(1u << 22)),
                            vfrombits(vshl(exponent_field, 23))));
}

//! The decode multipliers of 16 E8M0 codes as f32 bits (block_quantizer::e8m0's dec).
GRADCODEC_VINLINE vu16 block_scaled_e8m0_dec(vu16 code) {
  return vbits(vselect_bits(vequ_bits(code, blocks::e8m0_nan),
                            vfrombits(vset1u(detail::canonical_nan_bits)),
                            vfrombits(block_scaled_e8m0_pow2(code))));
}

//! nvfp4's 16 block scales from their maxima (block_scale_bits' e4m3 case): the E4M3 code
//! of (amax / 6) / g, 0x7F for a non-finite block, 0 for all when g is not positive.
GRADCODEC_VINLINE vu16 block_scaled_e4m3_codes(vu16 amax, float g) {
  const blocks::minifloat e4m3 = blocks::minifloat_of(element_format::e4m3);
  const vu16 code = g > 0.0f ? block_scaled_codes<false>(
                                   e4m3, (vfrombits(amax) / vset1(6.0f)) / vset1(g), vzero())
                             : vset1u(0);
  return vbits(vselect_bits(vequ_bits(vshr(amax, 23), 255), vfrombits(vset1u(blocks::e4m3_nan)),
                            vfrombits(code)));
}
//! nvfp4's decode multipliers value(code) * g as f32 bits (blocks::nvfp4_decode_multiplier).
GRADCODEC_VINLINE vu16 block_scaled_e4m3_multipliers(vu16 code, float g) {
  return vbits(block_scaled_values(blocks::minifloat_of(element_format::e4m3), code) * vset1(g));
}

//! The one-byte scale codes (E8M0, or nvfp4's E4M3) of 16 blocks from their maxima.
GRADCODEC_VINLINE vu16 block_scaled_scale_codes(const blocks::block_rule& r, vu16 amax, float g) {
  return r.scale == blocks::block_scale::e4m3
             ? block_scaled_e4m3_codes(amax, g)
             : block_scaled_e8m0_codes(amax, static_cast<std::uint32_t>(r.element.emax));
}

//! The quantizers of 16 blocks from their stored scale codes (e8m0 or e4m3), in the order
//! blocks::quantizer_of builds them.
struct block_scaled_batch_quantizers {
  alignas(64) std::uint32_t enc[16], dec[16];
  bool e4m3;

  GRADCODEC_VINLINE block_scaled_batch_quantizers(blocks::block_scale kind, vu16 code, float g)
      : e4m3(kind == blocks::block_scale::e4m3) {
    if (e4m3) {  // enc = 1 / d, capped (blocks::capped_quotient); a zero d never sends
      const vf16 d = vfrombits(block_scaled_e4m3_multipliers(code, g));
      vstore_u(enc, vbits(vmin(vset1(1.0f) / d, vset1(blocks::max_multiplier))));
      vstore_u(dec, vbits(d));
    } else {
      vstore_u(enc, block_scaled_e8m0_pow2(vset1u(254) - code));  // 255 wraps: never sent
      vstore_u(dec, block_scaled_e8m0_dec(code));
    }
  }
  //! Whether every block sends codes: no E8M0 NaN code, every E4M3 d positive and finite.
  GRADCODEC_VINLINE bool all_send(vu16 code) const {
    return e4m3 ? vhmaxu(vload_u(dec) - vset1u(1)) < 0x7F7FFFFFu : vhmaxu(code) < blocks::e8m0_nan;
  }
  //! Block j's quantizer (the batch's slow path): E4M3's from its d by the blocks' rule;
  //! E8M0's zero for the NaN code (whose dec is NaN).
  blocks::block_quantizer at(unsigned j) const {
    if (e4m3) return blocks::block_quantizer::decode_multiplier(blocks::bits_float(dec[j]));
    blocks::block_quantizer q;
    q.enc = blocks::bits_float(enc[j]);
    q.dec = blocks::bits_float(dec[j]);
    q.zero = blocks::is_nan(q.dec);
    return q;
  }
};

//! The codes (and residuals) of blocks b0 .. b0 + 15 when every one sends and, where a byte
//! format's residual decodes its codes (int8), every block's byte_decoder is plain
//! (byte_mul: their multipliers): as block_scaled_code_chunks, 64 elements at a time
//! (pack64), the scale of each 16 taken from the batch's arrays (group / 16 = 2^chunk_shift).
template <unsigned Bits, class Coder, class Src, class Res>
GRADCODEC_VINLINE void block_scaled_code_batch(blocks::minifloat f,
                                               const block_scaled_batch_quantizers& qs,
                                               const float* byte_mul, const Coder& coder,
                                               const Src& src, const Res& res, const float* values,
                                               std::uint64_t b0, std::uint64_t group,
                                               unsigned chunk_shift, std::uint8_t* stream) {
  const Src in = src;  // locals: the stores into the stream cannot change them
  const Res out = res;
  constexpr bool bytes = Bits == 8 && requires { Coder::format; };
  constexpr bool with_values = block_scaled_coder_values<Bits, Coder>;
  using byte_decoder = block_scaled_byte_decoder<block_scaled_coder_format<Coder>()>;
  const std::uint64_t begin = b0 * group;
  // Where pack64 is four pack16, holding four chunks' codes for it only spills the coder's
  // constants (AVX2): each chunk's codes are then packed at once.
  constexpr bool together = pack64_joint<Bits>;
  for (std::uint64_t c = 0; c < group; c += 4) {  // the batch holds `group` chunks of 16
    vu16 codes[4];
#pragma GCC unroll 4  // the codes stay in registers
    for (unsigned k = 0; k < 4; ++k) {
      const auto j = static_cast<unsigned>((c + k) >> chunk_shift);
      const std::uint64_t i = begin + (c + k) * 16;
      in.prefetch_next_block(i + 16 * group);  // the next batch, while this one is coded
      const vf16 v = in.load(i);
      const vf16 enc = vfrombits(vset1u(qs.enc[j]));
      const vf16 r = v * enc;
      if constexpr (Res::active && with_values) {
        vf16 value;
        codes[k] = coder.codes_values(r, value);
        out.store(i, v - value * vfrombits(vset1u(qs.dec[j])));
      } else {
        codes[k] = coder(r, i);
        if constexpr (Res::active) {
          vf16 x;
          if constexpr (bytes) {  // int8: the floating formats took codes_values
            x = byte_decoder::scaled(codes[k]) * vset1(byte_mul[j]);
          } else {
            x = vcanonical_nan(block_scaled_code_values<Bits>(f, values, codes[k]) *
                               vfrombits(vset1u(qs.dec[j])));
          }
          out.store(i, v - x);
        }
      }
      if constexpr (!together)
        pack16<Bits>(reinterpret_cast<std::byte*>(stream) + (i * Bits) / 8, codes[k]);
    }
    if constexpr (together)
      pack64<Bits>(reinterpret_cast<std::byte*>(stream) + (begin + c * 16) * Bits / 8, codes);
  }
}

//! For block_scaled_code_batch: each block's byte_decoder multiplier into mul; whether every
//! one is plain.
template <element_format F>
GRADCODEC_VINLINE bool block_scaled_batch_byte_muls(const block_scaled_batch_quantizers& qs,
                                                    float* mul) {
  bool plain = true;
  for (unsigned j = 0; j < block_scaled_batch; ++j) {
    const float dec = blocks::bits_float(qs.dec[j]);
    const block_scaled_byte_decoder<F> d(dec);
    plain = plain && d.plain;
    mul[j] = dec * blocks::pow2f(block_scaled_byte_decoder<F>::shift);
  }
  return plain;
}

//! Encodes blocks b0 .. b0 + 15 (full, of `group` elements; E8M0 or nvfp4's E4M3 scales,
//! g the tensor scale): scales into scales[b0 ..], codes, residuals. Returns whether one
//! was not finite.
template <unsigned Bits, bool Stochastic, class Src, class Res>
GRADCODEC_VINLINE bool block_scaled_encode_batch(const blocks::block_rule& r, float g,
                                                 block_scaled_uniforms& uniforms, const Src& src,
                                                 const Res& res, const float* values,
                                                 std::uint64_t b0, std::uint64_t group,
                                                 std::uint8_t* scales, std::uint8_t* stream) {
  const blocks::minifloat f = r.element;
  const vu16 amax = block_scaled_batch_maxima(src, b0, group);
  const vu16 code = block_scaled_scale_codes(r, amax, g);
  pack16<8>(reinterpret_cast<std::byte*>(scales + b0), code);
  const block_scaled_batch_quantizers qs(r.scale, code, g);
  const unsigned chunk_shift = static_cast<unsigned>(std::countr_zero(group / 16));
  const bool whole_batch = qs.all_send(code) && group == std::uint64_t{16} << chunk_shift;
  block_scaled_with_coder<Bits, Stochastic>(f, uniforms, [&](const auto& coder) GRADCODEC_VLAMBDA {
    using coder_type = std::remove_cvref_t<decltype(coder)>;
    alignas(64) float byte_mul[block_scaled_batch];
    bool fast = whole_batch;
    if constexpr (Res::active && Bits == 8 && requires { coder_type::format; } &&
                  !block_scaled_coder_values<Bits, coder_type>)
      fast = fast && block_scaled_batch_byte_muls<coder_type::format>(qs, byte_mul);
    if (fast)
      return block_scaled_code_batch<Bits>(f, qs, byte_mul, coder, src, res, values, b0, group,
                                           chunk_shift, stream);
    for (unsigned j = 0; j < block_scaled_batch; ++j) {
      const blocks::block_quantizer q = qs.at(j);
      if (q.zero && !Res::active)
        block_scaled_zero_codes(stream, (b0 + j) * group, group, Bits);
      else
        block_scaled_code_chunks<Bits>(f, q, !q.zero, coder, src, res, values, (b0 + j) * group,
                                       group, stream);
    }
  });
  return vhmaxu(amax) >= 0x7F800000u;  // a block held NaN or Inf
}

//! One unrotated block: its scan and stored scale, its codes written into the zeroed stream
//! (none for a non-finite block or a zero quantizer), and with a residual, p minus the
//! decoded value, as the generic composition computes it (values: every code's value).
template <unsigned Bits, bool Stochastic, class Src, class Res>
GRADCODEC_VINLINE blocks::block_scan block_scaled_encode_lanes(
    const blocks::block_rule& r, const blocks::counter_rng& rng, block_scaled_uniforms& uniforms,
    float g, const Src& src, const Res& res, const float* values, std::uint64_t begin,
    std::uint64_t len, std::uint8_t* stream, std::uint32_t& scale) {
  const blocks::minifloat f = r.element;  // a local: the stores below cannot change it
  const blocks::block_scan s = block_scaled_scan_lanes(src, begin, len);
  scale = blocks::block_scale_bits(r, s, g);
  const blocks::block_quantizer q = blocks::quantizer_of(r, scale, g);
  const bool send = s.finite && !q.zero;  // a non-finite block's quantizer is zero too
  if (!send && !Res::active) return s;
  const std::uint64_t whole = len & ~std::uint64_t{15};
  block_scaled_with_coder<Bits, Stochastic>(f, uniforms, [&](const auto& coder) GRADCODEC_VLAMBDA {
    block_scaled_code_chunks<Bits>(f, q, send, coder, src, res, values, begin, whole, stream);
  });
  for (std::uint64_t i = begin + whole; i < begin + len; ++i) {
    const float v = src.at(i);
    const std::uint32_t code = send ? blocks::code_at(r, rng, q, i, v) : 0u;
    if (send) blocks::put_code(stream, i, Bits, code);
    if constexpr (Res::active)
      res.store_one(i, v - detail::canonical_nan(blocks::fmul(values[code], q.dec)));
  }
  return s;
}

//! Loads inputs [first, first + m) into w (and into kept when not null) and returns the
//! bits of their largest |v| (Inf's or above when one is not finite).
template <class Src>
GRADCODEC_VINLINE vu16 block_scaled_load_piece(const Src& src, std::uint64_t first, std::uint32_t m,
                                               float* w, float* kept) {
  if (m < 16) {
    std::uint32_t a = 0;
    for (std::uint32_t j = 0; j < m; ++j) {
      const float v = src.at(first + j);
      w[j] = v;
      if (kept != nullptr) kept[j] = v;
      a = std::max(a, blocks::float_bits(v) & 0x7FFFFFFFu);
    }
    return vset1u(a);
  }
  vu16 a = vset1u(0);
  for (std::uint32_t j = 0; j < m; j += 16) {
    const vf16 v = src.load(first + j);
    a = vmaxu(a, vbits(vabs(v)));
    vstore(w + j, v);
    if (kept != nullptr) vstore(kept + j, v);
  }
  return a;
}

//! The scan of a rotated block of any length: its inputs' finiteness and its rotated values'
//! largest magnitude (blocks::scan_block's). A block of up to 256 elements is left rotated
//! in w (its inputs in kept when not null); a longer one passes through w piece by piece.
template <class Src>
GRADCODEC_VINLINE blocks::block_scan block_scaled_scan_rotated(const Src& src,
                                                               block_scaled_flips& flips,
                                                               std::uint64_t begin,
                                                               std::uint64_t len, float* w,
                                                               float* kept) {
  const bool whole = len <= blocks::max_rotation_piece;
  vu16 in = vset1u(0), out = vset1u(0);
  block_scaled_for_each_piece(len, [&](std::uint64_t off, std::uint32_t m) GRADCODEC_VLAMBDA {
    float* piece = whole ? w + off : w;
    in = vmaxu(in, block_scaled_load_piece(src, begin + off, m, piece,
                                           whole && kept != nullptr ? kept + off : nullptr));
    out = vmaxu(out, block_scaled_rotate_piece(piece, begin + off, m, flips));
  });
  blocks::block_scan s;
  s.finite = vhmaxu(in) < 0x7F800000u;
  if (s.finite) s.amax = blocks::bits_float(vhmaxu(out));
  return s;
}

//! A rotated block of any length through the lanes, as blocks::encode_block: a block of up
//! to 256 elements is loaded and rotated once, into a buffer; a longer one is read and
//! rotated again, piece by piece, for its codes (no buffer grows with a row). A rest of
//! fewer than 16 elements takes the scalar code rule.
template <unsigned Bits, bool Stochastic, class Src, class Res>
inline blocks::block_scan block_scaled_encode_rotated(
    const blocks::block_rule& r, const blocks::counter_rng& rng, block_scaled_uniforms& uniforms,
    block_scaled_flips& flips, float g, const Src& src, const Res& res, const float* values,
    std::uint64_t begin, std::uint64_t len, std::uint8_t* stream, std::uint32_t& scale) {
  alignas(64) float w[blocks::max_rotation_piece];
  alignas(64) float p[Res::active ? blocks::max_rotation_piece : 1];  // the inputs, kept
  const bool whole = len <= blocks::max_rotation_piece;
  const blocks::block_scan s =
      block_scaled_scan_rotated(src, flips, begin, len, w, Res::active ? p : nullptr);
  scale = blocks::block_scale_bits(r, s, g);
  const blocks::block_quantizer q = blocks::quantizer_of(r, scale, g);
  const bool send = s.finite && !q.zero;
  // The lanes write every code of a sent block's chunks of 16; a rest of fewer than 16 is
  // ORed in, and a block that sends nothing is zeros.
  const std::uint64_t zeroed = send ? len & ~std::uint64_t{15} : 0;
  if (zeroed < len) block_scaled_zero_codes(stream, begin + zeroed, len - zeroed, Bits);
  if (!send && !Res::active) return s;
  const vf16 enc = vset1(q.enc), dec = vset1(q.dec);
  block_scaled_with_coder<Bits, Stochastic>(
      r.element, uniforms, [&](const auto& coder) GRADCODEC_VLAMBDA {
        block_scaled_for_each_piece(len, [&](std::uint64_t off, std::uint32_t m) GRADCODEC_VLAMBDA {
          const std::uint64_t first = begin + off;
          float* piece = whole ? w + off : w;
          float* kept = !Res::active ? nullptr : whole ? p + off : p;
          if (!whole) {
            block_scaled_load_piece(src, first, m, piece, kept);
            if (send) block_scaled_rotate_piece(piece, first, m, flips);
          }
          if (m < 16) {
            for (std::uint32_t j = 0; j < m; ++j) {
              const std::uint32_t code =
                  send ? blocks::code_at(r, rng, q, first + j, piece[j]) : 0u;
              if (send) blocks::put_code(stream, first + j, Bits, code);
              if constexpr (Res::active) piece[j] = blocks::fmul(values[code], q.dec);
            }
          } else {
            for (std::uint32_t j = 0; j < m; j += 16) {
              vu16 codes = vset1u(0);
              if (send) {
                codes = coder(vload(piece + j) * enc, first + j);
                pack16<Bits>(reinterpret_cast<std::byte*>(stream) + (first + j) * Bits / 8, codes);
              }
              if constexpr (Res::active)
                vstore(piece + j, block_scaled_values(r.element, codes) * dec);
            }
          }
          if constexpr (Res::active) {
            block_scaled_unrotate_piece(piece, first, m, flips);
            if (m < 16)
              for (std::uint32_t j = 0; j < m; ++j)
                res.store_one(first + j, kept[j] - detail::canonical_nan(piece[j]));
            else
              for (std::uint32_t j = 0; j < m; j += 16)
                res.store(first + j, vload(kept + j) - vcanonical_nan(vload(piece + j)));
          }
        });
      });
  return s;
}

//! Lane k: the bits of block k's largest rotated |w| from the run's piece maxima, lanes past
//! the run's blocks repeating block 0 (so that they send when it does).
GRADCODEC_VINLINE vu16 block_scaled_run_maxima(const vu16* piece_max, unsigned blocks_in_run) {
  vu16 m[block_scaled_batch];
  for (unsigned k = 0; k < block_scaled_batch; ++k) m[k] = piece_max[k < blocks_in_run ? k : 0];
  return block_scaled_lane_maxima(m);
}

//! The scales and codes of a rotated run in w (block_scaled_encode_rotated_run), and with
//! Decoded, each block's decoded values in place of its rotated inputs. Apart from the input
//! and residual dtypes, which only the loads and stores around it see. Returns whether a
//! block was not finite.
template <unsigned Bits, bool Stochastic, bool Decoded>
inline bool block_scaled_code_rotated_run(const blocks::block_rule& r,
                                          block_scaled_uniforms& uniforms, float g, float* w,
                                          const vu16* piece_max, std::uint64_t b0,
                                          std::uint64_t group, std::uint8_t* scales,
                                          std::uint8_t* stream) {
  const std::uint64_t begin = b0 * group;
  const auto chunks = static_cast<unsigned>(group / 16);
  const auto blocks_in_run = static_cast<unsigned>(block_scaled_run_elements / group);
  bool nonfinite = false;
  block_scaled_with_coder<Bits, Stochastic>(
      r.element, uniforms, [&](const auto& coder) GRADCODEC_VLAMBDA {
        // Block k's codes (zeros where it sends nothing), and with Decoded its values.
        const auto code_block = [&](unsigned k, bool send, vf16 enc, vf16 dec) GRADCODEC_VLAMBDA {
          for (unsigned c = 0; c < chunks; ++c) {
            const unsigned j = (k * chunks + c) * 16;
            vu16 codes = vset1u(0);
            if (send) codes = coder(vload(w + j) * enc, begin + j);
            pack16<Bits>(reinterpret_cast<std::byte*>(stream) + (begin + j) * Bits / 8, codes);
            if constexpr (Decoded) vstore(w + j, block_scaled_values(r.element, codes) * dec);
          }
        };
        if (r.scale == blocks::block_scale::f32) {  // fp8row: one block per run
          for (unsigned k = 0; k < blocks_in_run; ++k) {
            const blocks::block_scan s = block_scaled_run_scan(piece_max[k]);
            const std::uint32_t scale = blocks::block_scale_bits(r, s, g);
            blocks::put_block_scale(r, scales, b0 + k, scale);
            nonfinite = nonfinite || !s.finite;
            const blocks::block_quantizer q = blocks::quantizer_of(r, scale, g);
            code_block(k, s.finite && !q.zero, vset1(q.enc), vset1(q.dec));
          }
          return;
        }
        // E8M0 and E4M3 scales lane-wise, as the unrotated batches take them.
        const vu16 amax = block_scaled_run_maxima(piece_max, blocks_in_run);
        const vu16 code = block_scaled_scale_codes(r, amax, g);
        alignas(16) std::uint8_t codes[block_scaled_batch];
        pack16<8>(reinterpret_cast<std::byte*>(codes), code);
        std::memcpy(scales + b0, codes, blocks_in_run);
        nonfinite = vhmaxu(amax) >= 0x7F800000u;
        const block_scaled_batch_quantizers qs(r.scale, code, g);
        if (qs.all_send(code)) {
          for (unsigned k = 0; k < blocks_in_run; ++k)
            code_block(k, true, vfrombits(vset1u(qs.enc[k])), vfrombits(vset1u(qs.dec[k])));
        } else {
          for (unsigned k = 0; k < blocks_in_run; ++k) {
            const blocks::block_quantizer q = qs.at(k);
            code_block(k, !q.zero, vset1(q.enc), vset1(q.dec));
          }
        }
      });
  return nonfinite;
}

//! The run of blocks b0 .. b0 + 256 / group - 1 (rotated, one piece each): the run rotated
//! at once, then each block's scale and codes from the buffer; with a residual, the decoded
//! values unrotated at once and subtracted from the kept inputs. Returns whether a block
//! was not finite.
template <unsigned Bits, bool Stochastic, class Src, class Res>
GRADCODEC_VINLINE bool block_scaled_encode_rotated_run(const blocks::block_rule& r,
                                                       block_scaled_uniforms& uniforms,
                                                       block_scaled_flips& flips, float g,
                                                       const Src& src, const Res& res,
                                                       std::uint64_t b0, std::uint64_t group,
                                                       std::uint8_t* scales, std::uint8_t* stream) {
  alignas(64) float w[block_scaled_run_elements];
  alignas(64) float p[Res::active ? block_scaled_run_elements : 1];  // the inputs, kept
  vu16 piece_max[block_scaled_run_elements / 16];
  const std::uint64_t begin = b0 * group;
  block_scaled_rotate_run(src, Res::active ? p : nullptr, w, begin,
                          static_cast<std::uint32_t>(group), flips, piece_max);
  const bool nonfinite = block_scaled_code_rotated_run<Bits, Stochastic, Res::active>(
      r, uniforms, g, w, piece_max, b0, group, scales, stream);
  if constexpr (Res::active) {
    block_scaled_unrotate_run(w, begin, static_cast<std::uint32_t>(group), flips);
    for (std::uint32_t j = 0; j < block_scaled_run_elements; j += 16)
      res.store(begin + j, vload(p + j) - vcanonical_nan(vload(w + j)));
  }
  return nonfinite;
}

//! Elements [begin, begin + len) (len a multiple of 16) of a byte format whose decoder is
//! plain: x = scaled(code) * mul, stored or fma-accumulated.
template <dtype T, element_format F, bool Accumulate>
GRADCODEC_VINLINE void block_scaled_decode_plain(vf16 mul, const std::uint8_t* stream,
                                                 std::uint64_t begin, std::uint64_t len,
                                                 tensor_view out, float alpha) {
  for (std::uint64_t j = begin; j < begin + len; j += 16) {
    const vf16 x = block_scaled_byte_decoder<F>::scaled_bytes(stream + j) * mul;
    if constexpr (Accumulate)
      vstore_typed<T>(out.data, j,
                      vcanonical_nan(vfma(vset1(alpha), x, vload_typed<T>(out.data, j))));
    else
      vstore_typed<T>(out.data, j, x);
  }
}

//! One unrotated block decoded: x = value(code) * dec, stored or fma-accumulated.
template <dtype T, element_format F, bool Accumulate>
GRADCODEC_VINLINE void block_scaled_decode_lanes(blocks::block_quantizer q, const float* values,
                                                 const std::uint8_t* stream, std::uint64_t begin,
                                                 std::uint64_t len, tensor_view out, float alpha) {
  constexpr blocks::minifloat f = blocks::minifloat_of(F);
  constexpr unsigned Bits = f.bits;
  const vf16 dec = vset1(q.dec);
  const block_scaled_byte_decoder<F> byte_decoded(q.dec);
  const std::uint64_t whole = len & ~std::uint64_t{15};
  if (Bits == 8 && byte_decoded.plain) {
    block_scaled_decode_plain<T, F, Accumulate>(byte_decoded.mul, stream, begin, whole, out, alpha);
  } else {
    for (std::uint64_t j = 0; j < whole; j += 16) {
      vf16 x;
      if constexpr (Bits == 8)
        x = byte_decoded.bytes(stream + begin + j);
      else
        x = block_scaled_code_values<Bits>(
                f, values,
                unpack16<Bits>(reinterpret_cast<const std::byte*>(stream) +
                               (begin + j) * Bits / 8)) *
            dec;
      if constexpr (Accumulate) x = vfma(vset1(alpha), x, vload_typed<T>(out.data, begin + j));
      vstore_typed<T>(out.data, begin + j, vcanonical_nan(x));
    }
  }
  const value_to_output emit{out, alpha, Accumulate};
  for (std::uint64_t i = begin + whole; i < begin + len; ++i)
    emit(i, blocks::fmul(values[blocks::get_code(stream, i, Bits)], q.dec));
}

//! Every code's value (element_value), once per call: the scalar paths and the 4-bit lanes
//! look codes up here.
struct block_scaled_values_table {
  float v[256];
  explicit block_scaled_values_table(const blocks::minifloat& f) {
    for (std::uint32_t k = 0; k < (1u << f.bits); ++k) v[k] = blocks::element_value(f, k);
  }
};

//! Decodes blocks b0 .. b0 + 15 (full, unrotated, of `group` elements; E8M0 or E4M3
//! scales, g nvfp4's tensor scale).
template <dtype T, element_format F, bool Accumulate>
GRADCODEC_VINLINE void block_scaled_decode_batch(const blocks::block_rule& r, float g,
                                                 const float* values, const std::uint8_t* scales,
                                                 const std::uint8_t* stream, std::uint64_t b0,
                                                 std::uint64_t group, tensor_view out,
                                                 float alpha) {
  const vu16 code = unpack16<8>(reinterpret_cast<const std::byte*>(scales + b0));
  using byte_decoder = block_scaled_byte_decoder<F>;
  if constexpr (blocks::minifloat_of(F).bits == 8 && !byte_decoder::e5m2) {
    // E8M0 codes below 255 - shift: dec * 2^shift is a finite power of two, so every block
    // is plain; its multiplier is that power, from the code alone.
    if (r.scale == blocks::block_scale::e8m0 &&
        vhmaxu(code) < 255u - std::max(byte_decoder::shift, 0)) {
      alignas(64) float mul[16];
      vstore(mul,
             vfrombits(block_scaled_e8m0_dec(code)) * vset1(blocks::pow2f(byte_decoder::shift)));
      for (unsigned j = 0; j < block_scaled_batch; ++j)
        block_scaled_decode_plain<T, F, Accumulate>(vset1(mul[j]), stream, (b0 + j) * group, group,
                                                    out, alpha);
      return;
    }
  }
  const block_scaled_batch_quantizers qs(r.scale, code, g);
  for (unsigned j = 0; j < block_scaled_batch; ++j)
    block_scaled_decode_lanes<T, F, Accumulate>(qs.at(j), values, stream, (b0 + j) * group, group,
                                                out, alpha);
}

//! Whether blocks [b, b + 16) can go as one batch: full unrotated blocks of a multiple of
//! 16 elements with one-byte scales (E8M0, nvfp4's E4M3), all before `end` (the task's end).
inline bool block_scaled_batch_fits(const blocks::block_rule& r, std::uint64_t group,
                                    std::uint64_t n, std::uint64_t b, std::uint64_t end) {
  return r.scale != blocks::block_scale::f32 && !r.rotate && group % 16 == 0 &&
         b + block_scaled_batch <= end && (b + block_scaled_batch) * group <= n;
}

//! A rotated block of any length decoded through the lanes, piece by piece (a rest of fewer
//! than 16 elements by the scalar steps).
template <dtype T, element_format F, bool Accumulate>
inline void block_scaled_decode_rotated(const blocks::block_quantizer& q, const float* values,
                                        block_scaled_flips& flips, const std::uint8_t* stream,
                                        std::uint64_t begin, std::uint64_t len, tensor_view out,
                                        float alpha) {
  constexpr blocks::minifloat f = blocks::minifloat_of(F);
  constexpr unsigned Bits = f.bits;
  alignas(64) float w[blocks::max_rotation_piece];
  const vf16 dec = vset1(q.dec);
  block_scaled_for_each_piece(len, [&](std::uint64_t off, std::uint32_t m) GRADCODEC_VLAMBDA {
    const std::uint64_t first = begin + off;
    if (m < 16) {
      for (std::uint32_t j = 0; j < m; ++j)
        w[j] = blocks::fmul(values[blocks::get_code(stream, first + j, Bits)], q.dec);
      block_scaled_unrotate_piece(w, first, m, flips);
      const value_to_output emit{out, alpha, Accumulate};
      for (std::uint32_t j = 0; j < m; ++j) emit(first + j, w[j]);
      return;
    }
    for (std::uint32_t j = 0; j < m; j += 16)
      vstore(w + j,
             block_scaled_values(f, unpack16<Bits>(reinterpret_cast<const std::byte*>(stream) +
                                                   (first + j) * Bits / 8)) *
                 dec);
    block_scaled_unrotate_piece(w, first, m, flips);
    for (std::uint32_t j = 0; j < m; j += 16) {
      vf16 x = vload(w + j);
      if constexpr (Accumulate) x = vfma(vset1(alpha), x, vload_typed<T>(out.data, first + j));
      vstore_typed<T>(out.data, first + j, vcanonical_nan(x));
    }
  });
}

//! The run of blocks b0 .. b0 + 256 / group - 1 (rotated, one piece each) decoded: every
//! block's values into a buffer, unrotated at once, then stored or fma-accumulated.
template <dtype T, element_format F, bool Accumulate>
GRADCODEC_VINLINE void block_scaled_decode_rotated_run(
    const blocks::block_rule& r, float g, const float* values, const std::uint8_t* scales,
    block_scaled_flips& flips, const std::uint8_t* stream, std::uint64_t b0, std::uint64_t group,
    tensor_view out, float alpha) {
  constexpr blocks::minifloat f = blocks::minifloat_of(F);
  constexpr unsigned Bits = f.bits;
  using byte_decoder = block_scaled_byte_decoder<F>;
  alignas(64) float w[block_scaled_run_elements];
  const std::uint64_t begin = b0 * group;
  const auto chunks = static_cast<unsigned>(group / 16);
  const auto blocks_in_run = static_cast<unsigned>(block_scaled_run_elements / group);
  // Block k's values value(code) * d into the buffer.
  const auto decode_block = [&](unsigned k, float d) GRADCODEC_VLAMBDA {
    const vf16 dec = vset1(d);
    const byte_decoder byte_decoded(d);  // value(code) * d, NaN where it is
    for (unsigned c = 0; c < chunks; ++c) {
      const unsigned j = (k * chunks + c) * 16;
      if constexpr (Bits == 8)
        vstore(w + j, byte_decoded.bytes(stream + begin + j));
      else
        vstore(w + j, block_scaled_code_values<Bits>(
                          f, values,
                          unpack16<Bits>(reinterpret_cast<const std::byte*>(stream) +
                                         (begin + j) * Bits / 8)) *
                          dec);
    }
  };
  if (r.scale == blocks::block_scale::e4m3) {
    // nvfp4's scales lane-wise, as block_scaled_decode_batch takes them: its scalar
    // multiplier rule costs more than a block of 16 elements' decode.
    alignas(16) std::uint8_t bytes[block_scaled_batch] = {};
    std::memcpy(bytes, scales + b0, blocks_in_run);
    const vu16 code = unpack16<8>(reinterpret_cast<const std::byte*>(bytes));
    const block_scaled_batch_quantizers qs(r.scale, code, g);
    for (unsigned k = 0; k < blocks_in_run; ++k) decode_block(k, qs.at(k).dec);
  } else {
    for (unsigned k = 0; k < blocks_in_run; ++k)
      decode_block(k, blocks::quantizer_of(r, blocks::get_block_scale(r, scales, b0 + k), g).dec);
  }
  block_scaled_unrotate_run(w, begin, static_cast<std::uint32_t>(group), flips);
  for (std::uint32_t j = 0; j < block_scaled_run_elements; j += 16) {
    vf16 x = vload(w + j);
    if constexpr (Accumulate) x = vfma(vset1(alpha), x, vload_typed<T>(out.data, begin + j));
    vstore_typed<T>(out.data, begin + j, vcanonical_nan(x));
  }
}

//! Error feedback outside the 16-lane path needs p = g + e for the whole tensor.
inline std::size_t block_scaled_workspace(const codec_spec& spec, const_tensor_view in,
                                          operation op) {
  if (op != operation::encode_with_feedback) return 0;
  const std::uint64_t group = detail::block_scaled_group(spec, in.n, in.rows);
  return block_scaled_lanes(detail::block_rule_of(spec), group) ? 0 : in.n * sizeof(float);
}

//! Encode, or with a residual (Feedback) the fused error-feedback encode, of any block-scaled
//! spec. The scalar path's feedback encodes p = g + e from the workspace and then subtracts
//! the decoded blocks, which is the generic composition without its decoded buffer.
template <bool Feedback>
inline status block_scaled_run(const detail::encode_call& c, tensor_view residual) {
  const std::uint64_t n = c.in.n;
  const blocks::block_rule rule = detail::block_rule_of(c.spec);
  const std::uint64_t group = detail::block_scaled_group(c.spec, n, c.in.rows);
  const blocks::block_scaled_layout l = blocks::layout_of(rule, n, group);
  if (l.total > c.capacity) return too_small();
  auto* payload = reinterpret_cast<std::uint8_t*>(c.payload);
  std::uint8_t* stream = payload + l.codes_offset;
  const bool lanes = block_scaled_lanes(rule, group);
  const bool runs = block_scaled_runs(rule, group);
  // The lanes write every code byte (block_scaled_zero_codes where a block sends none); the
  // scalar rules OR codes into a zeroed stream.
  std::memset(payload, 0, lanes ? l.codes_offset : l.total);
  if (lanes) std::memset(stream + l.codes_bytes, 0, l.total - l.codes_offset - l.codes_bytes);
  const auto rng = blocks::counter_rng::make(c.ctx.seed, c.ctx.step, c.ctx.tensor_id);
  if (rule.rotate) blocks::write_rng_key(rng, payload + l.key_offset);
  const std::uint64_t per = block_scaled_blocks_per_task(group);
  const std::uint64_t tasks = blocks::ceil_div(l.blocks, per);
  const int threads = threads_for(c.threads, tasks);
  const block_scaled_values_table values(rule.element);
  const auto span_of = [&](std::uint64_t b) {
    const std::uint64_t begin = b * group;
    return std::pair{begin, std::min(n - begin, group)};
  };
  const auto task_blocks = [&](std::uint64_t t) {
    return std::pair{t * per, std::min(l.blocks, (t + 1) * per)};
  };

  // The input the blocks quantize: in (or p = g + e from the workspace), or on the lanes
  // the 16-lane source of in or of g + e.
  const_tensor_view in = c.in;
  if (Feedback && !lanes) {
    auto* p = reinterpret_cast<float*>(c.workspace.data());
    parallel_for(threads, tasks, [&](std::uint64_t t) {
      const auto [b0, b1] = task_blocks(t);
      for (std::uint64_t i = b0 * group; i < std::min(n, b1 * group); ++i)
        p[i] = blocks::fadd_nan_first(detail::load_value(c.in.data, c.in.type, i),
                                      detail::load_value(residual.data, residual.type, i));
    });
    in = {p, n, dtype::f32, c.in.rows};
  }
  // Calls fn(src, res) with the lanes' source and residual sink, for the run-time dtypes.
  const auto with_lanes = [&](auto&& fn) {
    with_dtype(c.in.type, [&]<dtype G>() {
      if constexpr (Feedback)
        with_dtype(residual.type, [&]<dtype E>() {
          fn(block_scaled_feedback_input<G, E>{c.in.data, residual.data},
             block_scaled_residual<E>{residual.data});
        });
      else
        fn(block_scaled_input<G>{c.in.data}, block_scaled_no_residual{});
    });
  };

  float g = 0.0f;
  if (rule.tensor_scale) {
    // Non-negative floats order as their bits.
    std::atomic<std::uint32_t> amax_bits{0};
    // scan(b, end, a) raises a to the largest finite block maximum of blocks from b on
    // and returns the next block to scan.
    const auto scan_tasks = [&](const auto& scan) {
      parallel_for(threads, tasks, [&](std::uint64_t t) {
        float a = 0.0f;
        const auto [b0, b1] = task_blocks(t);
        for (std::uint64_t b = b0; b < b1;) b = scan(b, b1, a);
        std::uint32_t seen = amax_bits.load(std::memory_order_relaxed);
        const std::uint32_t mine = blocks::float_bits(a);
        while (mine > seen && !amax_bits.compare_exchange_weak(seen, mine)) {
        }
      });
    };
    const auto raise = [](float& a, const blocks::block_scan& s) {
      if (s.finite && s.amax > a) a = s.amax;
    };
    if (lanes)
      with_lanes([&](const auto& src, const auto&) {
        const philox16_gen rotation = philox16_make(rng, blocks::rng_stream::rotation);
        scan_tasks([&](std::uint64_t b, std::uint64_t end, float& a) {
          // Rotated blocks one by one, with one window of flips for the task's blocks.
          if (rule.rotate) {
            block_scaled_flips flips(rotation);
            alignas(64) float w[blocks::max_rotation_piece];
            while (b < end) {
              if (runs && block_scaled_run_fits(group, n, b, end)) {
                vu16 piece_max[block_scaled_run_elements / 16];
                block_scaled_rotate_run(src, nullptr, w, b * group,
                                        static_cast<std::uint32_t>(group), flips, piece_max);
                for (std::uint64_t k = 0; k < block_scaled_run_elements / group; ++k)
                  raise(a, block_scaled_run_scan(piece_max[k]));
                b += block_scaled_run_elements / group;
                continue;
              }
              const auto [begin, len] = span_of(b);
              raise(a, block_scaled_scan_rotated(src, flips, begin, len, w,
                                                 static_cast<float*>(nullptr)));
              ++b;
            }
            return end;
          }
          // Unrotated blocks that are all finite: the largest block maximum is the largest
          // |v| of the whole range, one read pass; else block by block.
          const std::uint32_t range_max =
              block_scaled_range_maximum(src, b * group, std::min(n, end * group));
          if (range_max < 0x7F800000u) {
            raise(a, {true, blocks::bits_float(range_max)});
            return end;
          }
          if (block_scaled_batch_fits(rule, group, n, b, end)) {
            const vu16 m = block_scaled_batch_maxima(src, b, group);
            const vu16 finite =
                vbits(vselect_bits(vequ_bits(vshr(m, 23), 255), vzero(), vfrombits(m)));
            raise(a, {true, blocks::bits_float(vhmaxu(finite))});
            return b + block_scaled_batch;
          }
          const auto [begin, len] = span_of(b);
          raise(a, block_scaled_scan_lanes(src, begin, len));
          return b + 1;
        });
      });
    else
      scan_tasks([&](std::uint64_t b, std::uint64_t, float& a) {
        const auto [begin, len] = span_of(b);
        raise(a, blocks::scan_block(rule, rng, begin, len, any_load{in.data, in.type}));
        return b + 1;
      });
    g = blocks::nvfp4_tensor_scale(blocks::bits_float(amax_bits.load()));
    std::memcpy(payload + l.tensor_scale_offset, &g, 4);
  }

  std::atomic<bool> nonfinite{false};
  if (lanes) {
    const philox16_gen gen = philox16_make(rng, blocks::rng_stream::rounding);
    const philox16_gen rotation = philox16_make(rng, blocks::rng_stream::rotation);
    with_lanes([&](const auto& src, const auto& res) {
      block_scaled_with_bits(rule.element.bits, [&]<unsigned Bits>() {
        const auto run = [&]<bool Stochastic>() {
          parallel_for(threads, tasks, [&](std::uint64_t t) {
            block_scaled_uniforms uniforms(gen);
            block_scaled_flips flips(rotation);
            const auto [b0, b1] = task_blocks(t);
            for (std::uint64_t b = b0; b < b1; ++b) {
              if (block_scaled_batch_fits(rule, group, n, b, b1)) {
                if (block_scaled_encode_batch<Bits, Stochastic>(rule, g, uniforms, src, res,
                                                                values.v, b, group,
                                                                payload + l.scales_offset, stream))
                  nonfinite.store(true, std::memory_order_relaxed);
                b += block_scaled_batch - 1;
                continue;
              }
              if (runs && block_scaled_run_fits(group, n, b, b1)) {
                if (block_scaled_encode_rotated_run<Bits, Stochastic>(
                        rule, uniforms, flips, g, src, res, b, group, payload + l.scales_offset,
                        stream))
                  nonfinite.store(true, std::memory_order_relaxed);
                b += block_scaled_run_elements / group - 1;
                continue;
              }
              const auto [begin, len] = span_of(b);
              if (!rule.rotate) block_scaled_zero_codes(stream, begin, len, Bits);
              std::uint32_t scale = 0;
              const blocks::block_scan s =
                  rule.rotate
                      ? block_scaled_encode_rotated<Bits, Stochastic>(rule, rng, uniforms, flips, g,
                                                                      src, res, values.v, begin,
                                                                      len, stream, scale)
                      : block_scaled_encode_lanes<Bits, Stochastic>(
                            rule, rng, uniforms, g, src, res, values.v, begin, len, stream, scale);
              blocks::put_block_scale(rule, payload + l.scales_offset, b, scale);
              if (!s.finite) nonfinite.store(true, std::memory_order_relaxed);
            }
          });
        };
        rule.stochastic ? run.template operator()<true>() : run.template operator()<false>();
      });
    });
  } else {
    block_scaled_with_input(in, [&](const auto& load) {
      parallel_for(threads, tasks, [&](std::uint64_t t) {
        std::uint32_t codes[blocks::max_rotation_piece];  // a short block's codes, then packed
        const auto [b0, b1] = task_blocks(t);
        for (std::uint64_t b = b0; b < b1; ++b) {
          const auto [begin, len] = span_of(b);
          const bool buffered = len <= blocks::max_rotation_piece;
          std::uint32_t scale = 0;
          const blocks::block_scan s =
              buffered ? blocks::encode_block(rule, rng, g, begin, len, load, scale,
                                              code_to_buffer{codes, begin})
                       : blocks::encode_block(rule, rng, g, begin, len, load, scale,
                                              code_to_stream{stream, rule.element.bits});
          blocks::put_block_scale(rule, payload + l.scales_offset, b, scale);
          if (!s.finite) nonfinite.store(true, std::memory_order_relaxed);
          if (buffered && s.finite)
            block_scaled_put_codes(stream, begin, len, rule.element.bits, codes);
          if constexpr (Feedback)
            blocks::decode_block(rule, rng, blocks::quantizer_of(rule, scale, g), begin, len,
                                 element_from_table{values.v, stream, rule.element.bits},
                                 residual_after_decode{static_cast<const float*>(in.data), 0,
                                                       residual.data, residual.type});
        }
      });
    });
  }
  if (nonfinite.load()) c.hdr.flags |= flag_nonfinite;
  c.hdr.group = static_cast<std::uint32_t>(group);
  c.hdr.level = static_cast<std::uint16_t>(c.spec.fmt);
  c.hdr.mode = detail::block_scaled_mode(c.spec);
  c.hdr.payload_bytes = l.total;
  return {};
}

inline status block_scaled_encode(const detail::encode_call& c) {
  return block_scaled_run<false>(c, {});
}
inline status block_scaled_encode_feedback(const detail::feedback_call& f) {
  return block_scaled_run<true>(f.enc, f.residual);
}

inline status block_scaled_decode(const detail::decode_call& c) {
  const std::uint64_t n = c.hdr.n, group = c.hdr.group;
  const auto format = static_cast<element_format>(c.hdr.level);
  const blocks::block_rule rule = blocks::block_rule_of(c.hdr.codec, format, c.hdr.mode);
  const blocks::block_scaled_layout l = blocks::layout_of(rule, n, group);
  const auto* payload = reinterpret_cast<const std::uint8_t*>(c.payload);
  const std::uint8_t* stream = payload + l.codes_offset;
  const blocks::counter_rng rng =
      rule.rotate ? blocks::read_rng_key(payload + l.key_offset) : blocks::counter_rng{};
  float g = 0.0f;
  if (rule.tensor_scale) std::memcpy(&g, payload + l.tensor_scale_offset, 4);
  const block_scaled_values_table values(rule.element);
  const std::uint64_t per = block_scaled_blocks_per_task(group);
  const std::uint64_t tasks = blocks::ceil_div(l.blocks, per);
  const int threads = threads_for(c.threads, tasks);
  const auto quantizer = [&](std::uint64_t b) {
    return blocks::quantizer_of(rule, blocks::get_block_scale(rule, payload + l.scales_offset, b),
                                g);
  };
  const auto decode_scalar = [&](std::uint64_t b) {
    const std::uint64_t begin = b * group;
    blocks::decode_block(rule, rng, quantizer(b), begin, std::min(n - begin, group),
                         element_from_table{values.v, stream, rule.element.bits},
                         value_to_output{c.out, c.alpha, c.accumulate});
  };
  if (block_scaled_lanes(rule, group)) {
    const bool runs = block_scaled_runs(rule, group);
    const philox16_gen rotation = philox16_make(rng, blocks::rng_stream::rotation);
    with_dtype(c.out.type, [&]<dtype T>() {
      block_scaled_with_format(format, [&]<element_format F>() {
        const auto run = [&]<bool Accumulate>() {
          parallel_for(threads, tasks, [&](std::uint64_t t) {
            block_scaled_flips flips(rotation);
            const std::uint64_t end = std::min(l.blocks, (t + 1) * per);
            for (std::uint64_t b = t * per; b < end; ++b) {
              if (block_scaled_batch_fits(rule, group, n, b, end)) {
                block_scaled_decode_batch<T, F, Accumulate>(
                    rule, g, values.v, payload + l.scales_offset, stream, b, group, c.out, c.alpha);
                b += block_scaled_batch - 1;
                continue;
              }
              if (runs && block_scaled_run_fits(group, n, b, end)) {
                block_scaled_decode_rotated_run<T, F, Accumulate>(rule, g, values.v,
                                                                  payload + l.scales_offset, flips,
                                                                  stream, b, group, c.out, c.alpha);
                b += block_scaled_run_elements / group - 1;
                continue;
              }
              const std::uint64_t begin = b * group, len = std::min(n - begin, group);
              if (!rule.rotate)
                block_scaled_decode_lanes<T, F, Accumulate>(quantizer(b), values.v, stream, begin,
                                                            len, c.out, c.alpha);
              else
                block_scaled_decode_rotated<T, F, Accumulate>(quantizer(b), values.v, flips, stream,
                                                              begin, len, c.out, c.alpha);
            }
          });
        };
        c.accumulate ? run.template operator()<true>() : run.template operator()<false>();
      });
    });
    return {};
  }
  parallel_for(threads, tasks, [&](std::uint64_t t) {
    for (std::uint64_t b = t * per; b < std::min(l.blocks, (t + 1) * per); ++b) decode_scalar(b);
  });
  return {};
}

// This family's rows of the variant's table (cpu/ops-inl.hpp).
GRADCODEC_CPU_CODEC_ROW(block_scaled);
