// SPDX-License-Identifier: Apache-2.0
//! @file
//! Packing of 16 codes of Bits bits (1..8) to and from the LSB-first bit stream of
//! docs/format.md: code j of a group occupies bits [j*Bits, (j+1)*Bits) of the group's
//! 2*Bits bytes, so groups of 16 codes are always whole bytes. pack16 writes and unpack16
//! reads exactly 2*Bits bytes. Included inside an ISA namespace after simd-inl.hpp.
//!
//! SIMD levels narrow the 16 lanes to 16 bytes first; Bits = 1, 2, 4, 8 then combine bytes
//! with byte/word arithmetic, the other widths with BMI2 pext (part of the AVX2 level).

#if GRADCODEC_CPU_LEVEL >= 1
//! The low byte of each lane, lanes in order (values must be < 256).
inline __m128i bitpack_narrow(vu16 codes) {
#if GRADCODEC_CPU_LEVEL == 2
  return _mm512_cvtepi32_epi8(codes.v);
#else
  // packus interleaves the 128-bit halves: dwords 0, 4 / 1, 5 hold lanes 0-3, 4-7 / 8-11, 12-15.
  const __m256i w = _mm256_packus_epi32(codes.lo, codes.hi);
  const __m256i b = _mm256_packus_epi16(w, w);
  return _mm256_castsi256_si128(
      _mm256_permutevar8x32_epi32(b, _mm256_setr_epi32(0, 4, 1, 5, 0, 4, 1, 5)));
#endif
}

//! Zero-extends 16 bytes to the 16 lanes.
inline vu16 bitpack_widen(__m128i b) {
#if GRADCODEC_CPU_LEVEL == 2
  return {_mm512_cvtepu8_epi32(b)};
#else
  return {_mm256_cvtepu8_epi32(b), _mm256_cvtepu8_epi32(_mm_unpackhi_epi64(b, b))};
#endif
}
#endif

//! Writes codes (each < 2^Bits) as 2*Bits bytes at dst.
template <unsigned Bits>
inline void pack16(std::byte* dst, vu16 codes) {
  static_assert(Bits >= 1 && Bits <= 8);
#if GRADCODEC_CPU_LEVEL >= 1
  if constexpr (Bits == 1) {
#if GRADCODEC_CPU_LEVEL == 2
    const std::uint16_t m = _mm512_test_epi32_mask(codes.v, codes.v);
#else
    const auto m = static_cast<std::uint16_t>(
        _mm256_movemask_ps(_mm256_castsi256_ps(_mm256_slli_epi32(codes.lo, 31))) |
        (_mm256_movemask_ps(_mm256_castsi256_ps(_mm256_slli_epi32(codes.hi, 31))) << 8));
#endif
    std::memcpy(dst, &m, 2);
  } else {
    const __m128i b = bitpack_narrow(codes);
    if constexpr (Bits == 8) {
      _mm_storeu_si128(reinterpret_cast<__m128i*>(dst), b);
    } else if constexpr (Bits == 4) {
      // Byte pairs (c0, c1) -> c0 + 16 * c1, then the 8 words to bytes.
      const __m128i x = _mm_maddubs_epi16(b, _mm_set1_epi16(0x1001));
      _mm_storel_epi64(reinterpret_cast<__m128i*>(dst), _mm_packus_epi16(x, x));
    } else if constexpr (Bits == 2) {
      // c0 + 4 c1 per word, then w0 + 16 w1 per dword, then the 4 dwords to bytes.
      const __m128i x = _mm_maddubs_epi16(b, _mm_set1_epi16(0x0401));
      const __m128i y = _mm_madd_epi16(x, _mm_set1_epi32(0x00100001));
      const __m128i z = _mm_packus_epi16(_mm_packus_epi32(y, y), y);
      const std::uint32_t v = static_cast<std::uint32_t>(_mm_cvtsi128_si32(z));
      std::memcpy(dst, &v, 4);
    } else {
      // Each 8-byte half holds 8 codes: pext keeps their low Bits bits, 8*Bits = Bits bytes.
      constexpr std::uint64_t keep = 0x0101010101010101ull * ((1u << Bits) - 1u);
      const auto lo = static_cast<std::uint64_t>(_mm_cvtsi128_si64(b));
      const auto hi = static_cast<std::uint64_t>(_mm_extract_epi64(b, 1));
      const std::uint64_t plo = _pext_u64(lo, keep), phi = _pext_u64(hi, keep);
      std::memcpy(dst, &plo, Bits);
      std::memcpy(dst + Bits, &phi, Bits);
    }
  }
#else
  std::uint8_t out[16] = {};
  for (unsigned j = 0; j < 16; ++j)
    for (unsigned k = 0; k < Bits; ++k)
      if ((codes.v[j] >> k) & 1u) {
        const unsigned bit = j * Bits + k;
        out[bit / 8] = static_cast<std::uint8_t>(out[bit / 8] | (1u << (bit % 8)));
      }
  std::memcpy(dst, out, 2 * Bits);
#endif
}

//! Whether pack64 narrows its four groups together (AVX-512, 8 and 4 bits) rather than
//! calling pack16 four times.
template <unsigned Bits>
inline constexpr bool pack64_joint = GRADCODEC_CPU_LEVEL == 2 && (Bits == 8 || Bits == 4);

//! Writes the 64 codes of codes[0..3] (each < 2^Bits, codes[k] the k-th group of 16) as
//! 8*Bits bytes at dst: four pack16 calls, or where pack64_joint the four groups narrowed
//! together (one 512-bit narrowing path where four 128-bit ones cost more).
template <unsigned Bits>
inline void pack64(std::byte* dst, const vu16* codes) {
#if GRADCODEC_CPU_LEVEL == 2
  if constexpr (pack64_joint<Bits>) {
    // The packs work within 128-bit lanes: lane L of w holds codes[v][4L .. 4L + 3] at
    // bytes 4v .. 4v + 3.
    const __m512i w = _mm512_packus_epi16(_mm512_packus_epi32(codes[0].v, codes[1].v),
                                          _mm512_packus_epi32(codes[2].v, codes[3].v));
    if constexpr (Bits == 8) {
      // Dword 4L + v of w is dword 4v + L of the output.
      const __m512i order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
      _mm512_storeu_si512(dst, _mm512_permutexvar_epi32(order, w));
    } else {
      // Byte pairs (c0, c1) -> c0 + 16 * c1; after the pack to bytes, word 8L + v of p
      // (v < 4) is word 4v + L of the output.
      const __m512i m = _mm512_maddubs_epi16(w, _mm512_set1_epi16(0x1001));
      const __m512i p = _mm512_packus_epi16(m, m);
      alignas(64) static constexpr std::uint16_t order[32] = {0, 8,  16, 24, 1, 9,  17, 25,
                                                              2, 10, 18, 26, 3, 11, 19, 27};
      const __m512i out = _mm512_permutexvar_epi16(_mm512_load_si512(order), p);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst), _mm512_castsi512_si256(out));
    }
    return;
  }
#endif
  for (unsigned k = 0; k < 4; ++k) pack16<Bits>(dst + 2 * Bits * k, codes[k]);
}

//! Reads the 16 codes of Bits bits stored in the 2*Bits bytes at src.
template <unsigned Bits>
inline vu16 unpack16(const std::byte* src) {
  static_assert(Bits >= 1 && Bits <= 8);
#if GRADCODEC_CPU_LEVEL >= 1
  if constexpr (Bits == 1) {
    std::uint16_t m;
    std::memcpy(&m, src, 2);
#if GRADCODEC_CPU_LEVEL == 2
    return {_mm512_maskz_set1_epi32(m, 1)};
#else
    const __m256i bit = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
    const __m256i one = _mm256_set1_epi32(1);
    const __m256i lo = _mm256_and_si256(_mm256_set1_epi32(m & 0xFF), bit);
    const __m256i hi = _mm256_and_si256(_mm256_set1_epi32(m >> 8), bit);
    return {_mm256_and_si256(_mm256_cmpeq_epi32(lo, bit), one),
            _mm256_and_si256(_mm256_cmpeq_epi32(hi, bit), one)};
#endif
  } else if constexpr (Bits == 8) {
    return bitpack_widen(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src)));
  } else if constexpr (Bits == 4) {
    const __m128i x = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(src));
    const __m128i nib = _mm_set1_epi8(0x0F);
    const __m128i lo = _mm_and_si128(x, nib), hi = _mm_and_si128(_mm_srli_epi16(x, 4), nib);
    return bitpack_widen(_mm_unpacklo_epi8(lo, hi));
  } else if constexpr (Bits == 2) {
    // Byte k of the 4 goes to lanes 4k..4k+3, each shifted right by 2 * (lane % 4).
    std::uint32_t w;
    std::memcpy(&w, src, 4);
    const __m128i rep =
        _mm_shuffle_epi8(_mm_cvtsi32_si128(static_cast<int>(w)),
                         _mm_setr_epi8(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3));
    const vu16 x = bitpack_widen(rep);
#if GRADCODEC_CPU_LEVEL == 2
    const __m512i sh = _mm512_setr_epi32(0, 2, 4, 6, 0, 2, 4, 6, 0, 2, 4, 6, 0, 2, 4, 6);
    return {_mm512_and_si512(_mm512_srlv_epi32(x.v, sh), _mm512_set1_epi32(3))};
#else
    const __m256i sh = _mm256_setr_epi32(0, 2, 4, 6, 0, 2, 4, 6);
    const __m256i three = _mm256_set1_epi32(3);
    return {_mm256_and_si256(_mm256_srlv_epi32(x.lo, sh), three),
            _mm256_and_si256(_mm256_srlv_epi32(x.hi, sh), three)};
#endif
  } else {
    // The two halves of Bits bytes each, by whole loads inside the 2*Bits bytes: a load of
    // fewer bytes into a wider variable would stall on the store it reads back.
    std::uint64_t first, last;
    if constexpr (Bits >= 4) {
      std::memcpy(&first, src, 8);
      std::memcpy(&last, src + 2 * Bits - 8, 8);
      first &= (std::uint64_t{1} << (8 * Bits)) - 1;
      last >>= 64 - 8 * Bits;
    } else {
      std::uint32_t a, b;
      std::memcpy(&a, src, 4);
      std::memcpy(&b, src + 2, 4);
      first = a & 0xFFFFFFu;
      last = b >> 8;
    }
    constexpr std::uint64_t keep = 0x0101010101010101ull * ((1u << Bits) - 1u);
    const std::uint64_t lo = _pdep_u64(first, keep), hi = _pdep_u64(last, keep);
    return bitpack_widen(_mm_set_epi64x(static_cast<long long>(hi), static_cast<long long>(lo)));
  }
#else
  std::uint8_t in[16] = {};
  std::memcpy(in, src, 2 * Bits);
  vu16 r;
  for (unsigned j = 0; j < 16; ++j) {
    std::uint32_t v = 0;
    for (unsigned k = 0; k < Bits; ++k) {
      const unsigned bit = j * Bits + k;
      v |= ((static_cast<std::uint32_t>(in[bit / 8]) >> (bit % 8)) & 1u) << k;
    }
    r.v[j] = v;
  }
  return r;
#endif
}
