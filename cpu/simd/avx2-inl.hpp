// SPDX-License-Identifier: Apache-2.0
//! @file
//! The SIMD layer's operations for AVX2 (GRADCODEC_CPU_LEVEL 1): two __m256 or __m256i halves per
//! vector. Included by cpu/simd-inl.hpp only, inside the variant's ISA namespace. The operations
//! and their meaning are those of cpu/simd/scalar-inl.hpp.

// ---- Types, memory, arithmetic, conversions ---------------------------------------------
struct vf16 {
  __m256 lo, hi;
};
struct vu16 {
  __m256i lo, hi;
};

GRADCODEC_VINLINE __m256i avx2_tail_mask(unsigned n) {
  const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(n)), idx);
}
GRADCODEC_VINLINE vf16 vload(const float* p) {
  return {_mm256_loadu_ps(p), _mm256_loadu_ps(p + 8)};
}
GRADCODEC_VINLINE vf16 vload_n(const float* p, unsigned n) {
  return {_mm256_maskload_ps(p, avx2_tail_mask(n)),
          _mm256_maskload_ps(p + 8, avx2_tail_mask(n > 8 ? n - 8 : 0))};
}
GRADCODEC_VINLINE void vstore(float* p, vf16 a) {
  _mm256_storeu_ps(p, a.lo);
  _mm256_storeu_ps(p + 8, a.hi);
}
GRADCODEC_VINLINE void vstore_n(float* p, vf16 a, unsigned n) {
  _mm256_maskstore_ps(p, avx2_tail_mask(n), a.lo);
  _mm256_maskstore_ps(p + 8, avx2_tail_mask(n > 8 ? n - 8 : 0), a.hi);
}
GRADCODEC_VINLINE vu16 vload_u(const std::uint32_t* p) {
  return {_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)),
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 8))};
}
GRADCODEC_VINLINE void vstore_u(std::uint32_t* p, vu16 a) {
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), a.lo);
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(p + 8), a.hi);
}
GRADCODEC_VINLINE vf16 vset1(float x) { return {_mm256_set1_ps(x), _mm256_set1_ps(x)}; }
GRADCODEC_VINLINE vu16 vset1u(std::uint32_t x) {
  return {_mm256_set1_epi32(static_cast<int>(x)), _mm256_set1_epi32(static_cast<int>(x))};
}
GRADCODEC_VINLINE vf16 vzero() { return {_mm256_setzero_ps(), _mm256_setzero_ps()}; }
#define GRADCODEC_V2(name, op) \
  GRADCODEC_VINLINE vf16 name(vf16 a, vf16 b) { return {op(a.lo, b.lo), op(a.hi, b.hi)}; }
GRADCODEC_V2(operator+, _mm256_add_ps)
GRADCODEC_V2(operator-, _mm256_sub_ps)
GRADCODEC_V2(operator*, _mm256_mul_ps)
GRADCODEC_V2(operator/, _mm256_div_ps)
GRADCODEC_V2(vmin, _mm256_min_ps)
GRADCODEC_V2(vmax, _mm256_max_ps)
#undef GRADCODEC_V2
#define GRADCODEC_U2(name, op) \
  GRADCODEC_VINLINE vu16 name(vu16 a, vu16 b) { return {op(a.lo, b.lo), op(a.hi, b.hi)}; }
GRADCODEC_U2(operator+, _mm256_add_epi32)
GRADCODEC_U2(operator-, _mm256_sub_epi32)
GRADCODEC_U2(operator&, _mm256_and_si256)
GRADCODEC_U2(operator|, _mm256_or_si256)
GRADCODEC_U2(operator^, _mm256_xor_si256)
GRADCODEC_U2(vminu, _mm256_min_epu32)
#undef GRADCODEC_U2
GRADCODEC_VINLINE vf16 vsqrt(vf16 a) { return {_mm256_sqrt_ps(a.lo), _mm256_sqrt_ps(a.hi)}; }
GRADCODEC_VINLINE vf16 vfma(vf16 a, vf16 b, vf16 c) {
  return {_mm256_fmadd_ps(a.lo, b.lo, c.lo), _mm256_fmadd_ps(a.hi, b.hi, c.hi)};
}
GRADCODEC_VINLINE vf16 vfloor(vf16 a) { return {_mm256_floor_ps(a.lo), _mm256_floor_ps(a.hi)}; }
GRADCODEC_VINLINE vu16 vbits(vf16 a) {
  return {_mm256_castps_si256(a.lo), _mm256_castps_si256(a.hi)};
}
GRADCODEC_VINLINE vf16 vfrombits(vu16 a) {
  return {_mm256_castsi256_ps(a.lo), _mm256_castsi256_ps(a.hi)};
}
GRADCODEC_VINLINE mask16 avx2_mask(__m256 lo, __m256 hi) {
  return static_cast<mask16>(static_cast<unsigned>(_mm256_movemask_ps(lo)) |
                             (static_cast<unsigned>(_mm256_movemask_ps(hi)) << 8));
}
GRADCODEC_VINLINE mask16 vlt(vf16 a, vf16 b) {
  return avx2_mask(_mm256_cmp_ps(a.lo, b.lo, _CMP_LT_OQ), _mm256_cmp_ps(a.hi, b.hi, _CMP_LT_OQ));
}
GRADCODEC_VINLINE mask16 vle(vf16 a, vf16 b) {
  return avx2_mask(_mm256_cmp_ps(a.lo, b.lo, _CMP_LE_OQ), _mm256_cmp_ps(a.hi, b.hi, _CMP_LE_OQ));
}
GRADCODEC_VINLINE mask16 veq(vf16 a, vf16 b) {
  return avx2_mask(_mm256_cmp_ps(a.lo, b.lo, _CMP_EQ_OQ), _mm256_cmp_ps(a.hi, b.hi, _CMP_EQ_OQ));
}
GRADCODEC_VINLINE __m256i avx2_expand(unsigned m8) {
  const __m256i bit = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
  return _mm256_cmpeq_epi32(_mm256_and_si256(_mm256_set1_epi32(static_cast<int>(m8)), bit), bit);
}
GRADCODEC_VINLINE vf16 vselect(mask16 m, vf16 a, vf16 b) {
  return {_mm256_blendv_ps(b.lo, a.lo, _mm256_castsi256_ps(avx2_expand(m & 0xFFu))),
          _mm256_blendv_ps(b.hi, a.hi, _mm256_castsi256_ps(avx2_expand(m >> 8)))};
}
GRADCODEC_VINLINE vu16 vselectu(mask16 m, vu16 a, vu16 b) {
  return {_mm256_blendv_epi8(b.lo, a.lo, avx2_expand(m & 0xFFu)),
          _mm256_blendv_epi8(b.hi, a.hi, avx2_expand(m >> 8))};
}
GRADCODEC_VINLINE vu16 vshl(vu16 a, unsigned s) {
  const __m128i c = _mm_cvtsi32_si128(static_cast<int>(s));
  return {_mm256_sll_epi32(a.lo, c), _mm256_sll_epi32(a.hi, c)};
}
GRADCODEC_VINLINE vu16 vshr(vu16 a, unsigned s) {
  const __m128i c = _mm_cvtsi32_si128(static_cast<int>(s));
  return {_mm256_srl_epi32(a.lo, c), _mm256_srl_epi32(a.hi, c)};
}
GRADCODEC_VINLINE mask16 vequ(vu16 a, vu16 b) {
  return avx2_mask(_mm256_castsi256_ps(_mm256_cmpeq_epi32(a.lo, b.lo)),
                   _mm256_castsi256_ps(_mm256_cmpeq_epi32(a.hi, b.hi)));
}
GRADCODEC_VINLINE mask16 vltu(vu16 a, vu16 b) {
  // a < b unsigned  <=>  min(a, b) == a and a != b
  const vu16 m = vminu(a, b);
  return static_cast<mask16>(vequ(m, a) & ~vequ(a, b));
}
//! x where a < b (unsigned), y elsewhere, by a lane-valued blend: vselectu(vltu(...)) moves
//! the mask through a general-purpose register and back.
GRADCODEC_VINLINE vu16 vselect_ltu(vu16 a, vu16 b, vu16 x, vu16 y) {
  const __m256i ge_lo = _mm256_cmpeq_epi32(_mm256_max_epu32(a.lo, b.lo), a.lo);
  const __m256i ge_hi = _mm256_cmpeq_epi32(_mm256_max_epu32(a.hi, b.hi), a.hi);
  return {_mm256_blendv_epi8(x.lo, y.lo, ge_lo), _mm256_blendv_epi8(x.hi, y.hi, ge_hi)};
}
//! x where a < b (signed), y elsewhere: one compare.
GRADCODEC_VINLINE vu16 vselect_lts(vu16 a, vu16 b, vu16 x, vu16 y) {
  return {_mm256_blendv_epi8(y.lo, x.lo, _mm256_cmpgt_epi32(b.lo, a.lo)),
          _mm256_blendv_epi8(y.hi, x.hi, _mm256_cmpgt_epi32(b.hi, a.hi))};
}
//! The sign bit of lane j set where bit j of bits is: each lane shifts its bit to the top.
GRADCODEC_VINLINE vu16 vsign_bits(std::uint32_t bits) {
  const __m256i b = _mm256_set1_epi32(static_cast<int>(bits));
  const __m256i top = _mm256_set1_epi32(static_cast<int>(0x80000000u));
  return {_mm256_and_si256(_mm256_sllv_epi32(b, _mm256_setr_epi32(31, 30, 29, 28, 27, 26, 25, 24)),
                           top),
          _mm256_and_si256(_mm256_sllv_epi32(b, _mm256_setr_epi32(23, 22, 21, 20, 19, 18, 17, 16)),
                           top)};
}
//! Sign-magnitude codes of one half (scalar-inl.hpp): sign & (m + 2^31 - 1) has the top bit
//! set where sign is negative and m is not 0, and blendv reads only that bit.
template <unsigned Bits>
GRADCODEC_VINLINE __m256i avx2_sign_magnitude(__m256i m, __m256i sign) {
  const __m256i negative =
      _mm256_and_si256(sign, _mm256_add_epi32(m, _mm256_set1_epi32(0x7FFFFFFF)));
  return _mm256_castps_si256(
      _mm256_blendv_ps(_mm256_castsi256_ps(m),
                       _mm256_castsi256_ps(_mm256_or_si256(m, _mm256_set1_epi32(1 << (Bits - 1)))),
                       _mm256_castsi256_ps(negative)));
}
template <unsigned Bits>
GRADCODEC_VINLINE vu16 vsign_magnitude(vu16 mag, vu16 s) {
  return {avx2_sign_magnitude<Bits>(mag.lo, s.lo), avx2_sign_magnitude<Bits>(mag.hi, s.hi)};
}
GRADCODEC_VINLINE vu16 vtrunc_u(vf16 a) {
  return {_mm256_cvttps_epi32(a.lo), _mm256_cvttps_epi32(a.hi)};
}
GRADCODEC_VINLINE vf16 vto_f(vu16 a) {
  return {_mm256_cvtepi32_ps(a.lo), _mm256_cvtepi32_ps(a.hi)};
}
GRADCODEC_VINLINE float vfold(vf16 a) {
  __m256 s8 = _mm256_add_ps(a.lo, a.hi);
  __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
  __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
  __m128 s1 = _mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1));
  return _mm_cvtss_f32(s1);
}
GRADCODEC_VINLINE vf16 vload_f16(const std::uint16_t* p) {
  return {_mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))),
          _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 8)))};
}
// Lanes below 2^16, so the unsigned pack does not saturate.
GRADCODEC_VINLINE vf16 vhalf_to_f(vu16 h) {
  return {_mm256_cvtph_ps(
              _mm_packus_epi32(_mm256_castsi256_si128(h.lo), _mm256_extracti128_si256(h.lo, 1))),
          _mm256_cvtph_ps(
              _mm_packus_epi32(_mm256_castsi256_si128(h.hi), _mm256_extracti128_si256(h.hi, 1)))};
}
GRADCODEC_VINLINE void vstore_f16(std::uint16_t* p, vf16 a) {
  _mm_storeu_si128(reinterpret_cast<__m128i*>(p),
                   _mm256_cvtps_ph(a.lo, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(p + 8),
                   _mm256_cvtps_ph(a.hi, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}

// ---- Sixteen 16-bit lanes (cpu/simd/scalar-inl.hpp) ---------------------------------------
#include "m256_h16-inl.hpp"
GRADCODEC_VINLINE vh16 vselect_eqh(vh16 a, vh16 b, vh16 x, vh16 y) {
  return {_mm256_blendv_epi8(y.v, x.v, _mm256_cmpeq_epi16(a.v, b.v))};
}
GRADCODEC_VINLINE vf16 vhalf_to_f(vh16 h) {
  return {_mm256_cvtph_ps(_mm256_castsi256_si128(h.v)),
          _mm256_cvtph_ps(_mm256_extracti128_si256(h.v, 1))};
}
GRADCODEC_VINLINE vu16 vload_u16(const std::uint16_t* p) {
  return {_mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))),
          _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 8)))};
}
GRADCODEC_VINLINE void vstore_u16(std::uint16_t* p, vu16 a) {  // lanes hold values < 2^16
  const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(a.lo, a.hi), 0xD8);
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), packed);
}

// ---- NaN-aware select and add -----------------------------------------------------------
GRADCODEC_VINLINE vu16 vselect_nan(vf16 a, vu16 if_nan, vu16 otherwise) {
  return {_mm256_blendv_epi8(otherwise.lo, if_nan.lo,
                             _mm256_castps_si256(_mm256_cmp_ps(a.lo, a.lo, _CMP_UNORD_Q))),
          _mm256_blendv_epi8(otherwise.hi, if_nan.hi,
                             _mm256_castps_si256(_mm256_cmp_ps(a.hi, a.hi, _CMP_UNORD_Q)))};
}

GRADCODEC_VINLINE vf16 vadd_nan_first(vf16 a, vf16 b) {
  __m256 lo, hi;
  asm("vaddps %2, %1, %0" : "=x"(lo) : "x"(a.lo), "x"(b.lo));
  asm("vaddps %2, %1, %0" : "=x"(hi) : "x"(a.hi), "x"(b.hi));
  return {lo, hi};
}

// ---- Lane-valued compare and unsigned max (quantizers, block scales) -----------------
GRADCODEC_VINLINE vu16 vlt_bits(vf16 a, vf16 b) {
  return {_mm256_castps_si256(_mm256_cmp_ps(a.lo, b.lo, _CMP_LT_OQ)),
          _mm256_castps_si256(_mm256_cmp_ps(a.hi, b.hi, _CMP_LT_OQ))};
}
GRADCODEC_VINLINE vu16 vmaxu(vu16 a, vu16 b) {
  return {_mm256_max_epu32(a.lo, b.lo), _mm256_max_epu32(a.hi, b.hi)};
}
GRADCODEC_VINLINE std::uint32_t vhmaxu(vu16 a) {
  __m256i m = _mm256_max_epu32(a.lo, a.hi);
  __m128i q = _mm_max_epu32(_mm256_castsi256_si128(m), _mm256_extracti128_si256(m, 1));
  q = _mm_max_epu32(q, _mm_shuffle_epi32(q, 0x4E));
  q = _mm_max_epu32(q, _mm_shuffle_epi32(q, 0xB1));
  return static_cast<std::uint32_t>(_mm_cvtsi128_si32(q));
}

// ---- Lane exchange (Hadamard butterflies) ---------------------------------------------
template <unsigned H>
GRADCODEC_VINLINE vf16 vswap_lanes(vf16 a) {
  if constexpr (H == 1) return {_mm256_permute_ps(a.lo, 0xB1), _mm256_permute_ps(a.hi, 0xB1)};
  if constexpr (H == 2) return {_mm256_permute_ps(a.lo, 0x4E), _mm256_permute_ps(a.hi, 0x4E)};
  if constexpr (H == 4)
    return {_mm256_permute2f128_ps(a.lo, a.lo, 0x01), _mm256_permute2f128_ps(a.hi, a.hi, 0x01)};
  return {a.hi, a.lo};
}

// ---- Sixteen-entry table lookup (4-bit codes) ------------------------------------------
GRADCODEC_VINLINE __m256 avx2_lookup16(__m256 t0, __m256 t1, __m256i i) {
  const __m256 high = _mm256_castsi256_ps(_mm256_slli_epi32(i, 28));  // bit 3 to the sign
  return _mm256_blendv_ps(_mm256_permutevar8x32_ps(t0, i), _mm256_permutevar8x32_ps(t1, i), high);
}
GRADCODEC_VINLINE vf16 vlookup16(const float* table, vu16 idx) {
  const __m256 t0 = _mm256_loadu_ps(table), t1 = _mm256_loadu_ps(table + 8);
  return {avx2_lookup16(t0, t1, idx.lo), avx2_lookup16(t0, t1, idx.hi)};
}

// ---- Signed compare and ordered compaction (sparse selection) ---------------------------
// Each half permutes through a 256-entry table of lane positions.
GRADCODEC_VINLINE mask16 vgti(vu16 a, vu16 b) {
  return avx2_mask(_mm256_castsi256_ps(_mm256_cmpgt_epi32(a.lo, b.lo)),
                   _mm256_castsi256_ps(_mm256_cmpgt_epi32(a.hi, b.hi)));
}
//! Entry m: the positions of m's set bits, one byte each, lowest first.
struct avx2_compress_table {
  std::uint64_t v[256];
};
constexpr avx2_compress_table avx2_make_compress_table() {
  avx2_compress_table t{};
  for (unsigned m = 0; m < 256; ++m) {
    unsigned c = 0;
    for (unsigned j = 0; j < 8; ++j)
      if ((m >> j) & 1u) t.v[m] |= static_cast<std::uint64_t>(j) << (8 * c++);
  }
  return t;
}
inline constexpr avx2_compress_table avx2_compress_lut = avx2_make_compress_table();
GRADCODEC_VINLINE __m256i avx2_compress8(__m256i a, unsigned m8) {
  const __m128i bytes = _mm_cvtsi64_si128(static_cast<long long>(avx2_compress_lut.v[m8]));
  return _mm256_permutevar8x32_epi32(a, _mm256_cvtepu8_epi32(bytes));
}
GRADCODEC_VINLINE unsigned vcompress_store(std::uint32_t* p, mask16 m, vu16 a) {
  const unsigned lo = m & 0xFFu, hi = static_cast<unsigned>(m) >> 8;
  const unsigned clo = vpopcount(static_cast<mask16>(lo));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), avx2_compress8(a.lo, lo));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(p + clo), avx2_compress8(a.hi, hi));
  return clo + vpopcount(static_cast<mask16>(hi));
}

// ---- Streaming stores -------------------------------------------------------------------
GRADCODEC_VINLINE void vstream(float* p, vf16 a) {
  _mm256_stream_ps(p, a.lo);
  _mm256_stream_ps(p + 8, a.hi);
}
GRADCODEC_VINLINE void vstream_fence() { _mm_sfence(); }

// ---- Select by lane-valued mask -----------------------------------------------------
GRADCODEC_VINLINE vf16 vselect_bits(vu16 m, vf16 a, vf16 b) {
  return {_mm256_blendv_ps(b.lo, a.lo, _mm256_castsi256_ps(m.lo)),
          _mm256_blendv_ps(b.hi, a.hi, _mm256_castsi256_ps(m.hi))};
}
