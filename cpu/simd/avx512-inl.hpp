// SPDX-License-Identifier: Apache-2.0
//! @file
//! The SIMD layer's operations for AVX-512 (GRADCODEC_CPU_LEVEL 2): one __m512 or __m512i per
//! vector. Included by cpu/simd-inl.hpp only, inside the variant's ISA namespace. The operations
//! and their meaning are those of cpu/simd/scalar-inl.hpp.

// ---- Types, memory, arithmetic, conversions ---------------------------------------------
struct vf16 {
  __m512 v;
};
struct vu16 {
  __m512i v;
};

GRADCODEC_VINLINE vf16 vload(const float* p) { return {_mm512_loadu_ps(p)}; }
GRADCODEC_VINLINE vf16 vload_n(const float* p, unsigned n) {
  return {_mm512_maskz_loadu_ps(static_cast<__mmask16>((1u << n) - 1u), p)};
}
GRADCODEC_VINLINE void vstore(float* p, vf16 a) { _mm512_storeu_ps(p, a.v); }
GRADCODEC_VINLINE void vstore_n(float* p, vf16 a, unsigned n) {
  _mm512_mask_storeu_ps(p, static_cast<__mmask16>((1u << n) - 1u), a.v);
}
GRADCODEC_VINLINE vu16 vload_u(const std::uint32_t* p) { return {_mm512_loadu_si512(p)}; }
GRADCODEC_VINLINE void vstore_u(std::uint32_t* p, vu16 a) { _mm512_storeu_si512(p, a.v); }
GRADCODEC_VINLINE vf16 vset1(float x) { return {_mm512_set1_ps(x)}; }
GRADCODEC_VINLINE vu16 vset1u(std::uint32_t x) { return {_mm512_set1_epi32(static_cast<int>(x))}; }
GRADCODEC_VINLINE vf16 vzero() { return {_mm512_setzero_ps()}; }
GRADCODEC_VINLINE vf16 operator+(vf16 a, vf16 b) { return {_mm512_add_ps(a.v, b.v)}; }
GRADCODEC_VINLINE vf16 operator-(vf16 a, vf16 b) { return {_mm512_sub_ps(a.v, b.v)}; }
GRADCODEC_VINLINE vf16 operator*(vf16 a, vf16 b) { return {_mm512_mul_ps(a.v, b.v)}; }
GRADCODEC_VINLINE vf16 operator/(vf16 a, vf16 b) { return {_mm512_div_ps(a.v, b.v)}; }
GRADCODEC_VINLINE vf16 vsqrt(vf16 a) { return {_mm512_sqrt_ps(a.v)}; }
GRADCODEC_VINLINE vf16 vfma(vf16 a, vf16 b, vf16 c) { return {_mm512_fmadd_ps(a.v, b.v, c.v)}; }
GRADCODEC_VINLINE vf16 vmin(vf16 a, vf16 b) {
  return {_mm512_min_ps(a.v, b.v)};
}  // finite inputs only
GRADCODEC_VINLINE vf16 vmax(vf16 a, vf16 b) {
  return {_mm512_max_ps(a.v, b.v)};
}  // finite inputs only
GRADCODEC_VINLINE vf16 vfloor(vf16 a) {
  return {_mm512_roundscale_ps(a.v, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC)};
}
GRADCODEC_VINLINE vu16 vbits(vf16 a) { return {_mm512_castps_si512(a.v)}; }
GRADCODEC_VINLINE vf16 vfrombits(vu16 a) { return {_mm512_castsi512_ps(a.v)}; }
GRADCODEC_VINLINE mask16 vlt(vf16 a, vf16 b) { return _mm512_cmp_ps_mask(a.v, b.v, _CMP_LT_OQ); }
GRADCODEC_VINLINE mask16 vle(vf16 a, vf16 b) { return _mm512_cmp_ps_mask(a.v, b.v, _CMP_LE_OQ); }
GRADCODEC_VINLINE mask16 veq(vf16 a, vf16 b) { return _mm512_cmp_ps_mask(a.v, b.v, _CMP_EQ_OQ); }
GRADCODEC_VINLINE vf16 vselect(mask16 m, vf16 a, vf16 b) {
  return {_mm512_mask_blend_ps(m, b.v, a.v)};
}
GRADCODEC_VINLINE vu16 vselectu(mask16 m, vu16 a, vu16 b) {
  return {_mm512_mask_blend_epi32(m, b.v, a.v)};
}
GRADCODEC_VINLINE vu16 operator+(vu16 a, vu16 b) { return {_mm512_add_epi32(a.v, b.v)}; }
GRADCODEC_VINLINE vu16 operator-(vu16 a, vu16 b) { return {_mm512_sub_epi32(a.v, b.v)}; }
GRADCODEC_VINLINE vu16 operator&(vu16 a, vu16 b) { return {_mm512_and_si512(a.v, b.v)}; }
GRADCODEC_VINLINE vu16 operator|(vu16 a, vu16 b) { return {_mm512_or_si512(a.v, b.v)}; }
GRADCODEC_VINLINE vu16 operator^(vu16 a, vu16 b) { return {_mm512_xor_si512(a.v, b.v)}; }
GRADCODEC_VINLINE vu16 vshl(vu16 a, unsigned s) {
  return {_mm512_sll_epi32(a.v, _mm_cvtsi32_si128(static_cast<int>(s)))};
}
GRADCODEC_VINLINE vu16 vshr(vu16 a, unsigned s) {
  return {_mm512_srl_epi32(a.v, _mm_cvtsi32_si128(static_cast<int>(s)))};
}
GRADCODEC_VINLINE vu16 vminu(vu16 a, vu16 b) { return {_mm512_min_epu32(a.v, b.v)}; }
GRADCODEC_VINLINE mask16 vltu(vu16 a, vu16 b) {
  return _mm512_cmp_epu32_mask(a.v, b.v, _MM_CMPINT_LT);
}
//! x where a < b (unsigned), y elsewhere.
GRADCODEC_VINLINE vu16 vselect_ltu(vu16 a, vu16 b, vu16 x, vu16 y) {
  return vselectu(vltu(a, b), x, y);
}
//! x where a < b (signed), y elsewhere.
GRADCODEC_VINLINE vu16 vselect_lts(vu16 a, vu16 b, vu16 x, vu16 y) {
  return vselectu(_mm512_cmplt_epi32_mask(a.v, b.v), x, y);
}
//! The sign bit of lane j set where bit j of bits is: bits is the lane mask.
GRADCODEC_VINLINE vu16 vsign_bits(std::uint32_t bits) {
  return {_mm512_maskz_mov_epi32(static_cast<__mmask16>(bits),
                                 _mm512_set1_epi32(static_cast<int>(0x80000000u)))};
}
//! Sign-magnitude codes (scalar-inl.hpp): mag + 2^(Bits-1) - 1 has bit Bits - 1 set exactly
//! where mag is not 0; one ternary op ANDs it with s's shifted sign and the sign bit.
template <unsigned Bits>
GRADCODEC_VINLINE vu16 vsign_magnitude(vu16 mag, vu16 s) {
  const __m512i sign_bit = _mm512_set1_epi32(1 << (Bits - 1));
  const __m512i nonzero = _mm512_add_epi32(mag.v, _mm512_set1_epi32((1 << (Bits - 1)) - 1));
  return {_mm512_or_si512(mag.v, _mm512_ternarylogic_epi32(
                                     nonzero, _mm512_srli_epi32(s.v, 32 - Bits), sign_bit, 0x80))};
}
GRADCODEC_VINLINE mask16 vequ(vu16 a, vu16 b) {
  return _mm512_cmp_epu32_mask(a.v, b.v, _MM_CMPINT_EQ);
}
//! Truncating conversion of values in [0, 2^31).
GRADCODEC_VINLINE vu16 vtrunc_u(vf16 a) { return {_mm512_cvttps_epi32(a.v)}; }
GRADCODEC_VINLINE vf16 vto_f(vu16 a) { return {_mm512_cvtepi32_ps(a.v)}; }  // values < 2^31
//! Lane j + lane j+h for h = 8, 4, 2, 1: the canonical fold.
GRADCODEC_VINLINE float vfold(vf16 a) {
  __m256 s8 = _mm256_add_ps(_mm512_castps512_ps256(a.v),
                            _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(a.v), 1)));
  __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
  __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
  __m128 s1 = _mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1));
  return _mm_cvtss_f32(s1);
}
GRADCODEC_VINLINE vf16 vload_f16(const std::uint16_t* p) {
  return {_mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)))};
}
GRADCODEC_VINLINE vf16 vhalf_to_f(vu16 h) { return {_mm512_cvtph_ps(_mm512_cvtepi32_epi16(h.v))}; }
GRADCODEC_VINLINE void vstore_f16(std::uint16_t* p, vf16 a) {
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(p),
                      _mm512_cvtps_ph(a.v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}

// ---- Sixteen 16-bit lanes (cpu/simd/scalar-inl.hpp) ---------------------------------------
#include "m256_h16-inl.hpp"
GRADCODEC_VINLINE vh16 vselect_eqh(vh16 a, vh16 b, vh16 x, vh16 y) {
  return {_mm256_mask_blend_epi16(_mm256_cmpeq_epi16_mask(a.v, b.v), y.v, x.v)};
}
GRADCODEC_VINLINE vf16 vhalf_to_f(vh16 h) { return {_mm512_cvtph_ps(h.v)}; }
GRADCODEC_VINLINE vu16 vload_u16(const std::uint16_t* p) {
  return {_mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)))};
}
GRADCODEC_VINLINE void vstore_u16(std::uint16_t* p, vu16 a) {
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), _mm512_cvtepi32_epi16(a.v));
}

// ---- NaN-aware select and add -----------------------------------------------------------
GRADCODEC_VINLINE vu16 vselect_nan(vf16 a, vu16 if_nan, vu16 otherwise) {
  return vselectu(_mm512_cmp_ps_mask(a.v, a.v, _CMP_UNORD_Q), if_nan, otherwise);
}

GRADCODEC_VINLINE vf16 vadd_nan_first(vf16 a, vf16 b) {
  __m512 r;
  asm("vaddps %2, %1, %0" : "=v"(r) : "v"(a.v), "v"(b.v));
  return {r};
}

// ---- Lane-valued compare and unsigned max (quantizers, block scales) -----------------
GRADCODEC_VINLINE vu16 vlt_bits(vf16 a, vf16 b) {
  return {_mm512_movm_epi32(_mm512_cmp_ps_mask(a.v, b.v, _CMP_LT_OQ))};
}
GRADCODEC_VINLINE vu16 vmaxu(vu16 a, vu16 b) { return {_mm512_max_epu32(a.v, b.v)}; }
GRADCODEC_VINLINE std::uint32_t vhmaxu(vu16 a) {
  return static_cast<std::uint32_t>(_mm512_reduce_max_epu32(a.v));
}

// ---- Lane exchange (Hadamard butterflies) ---------------------------------------------
template <unsigned H>
GRADCODEC_VINLINE vf16 vswap_lanes(vf16 a) {
  if constexpr (H == 1) return {_mm512_permute_ps(a.v, 0xB1)};
  if constexpr (H == 2) return {_mm512_permute_ps(a.v, 0x4E)};
  if constexpr (H == 4) return {_mm512_shuffle_f32x4(a.v, a.v, 0xB1)};
  return {_mm512_shuffle_f32x4(a.v, a.v, 0x4E)};
}

// ---- Sixteen-entry table lookup (4-bit codes) ------------------------------------------
GRADCODEC_VINLINE vf16 vlookup16(const float* table, vu16 idx) {
  return {_mm512_permutexvar_ps(idx.v, _mm512_loadu_ps(table))};
}

// ---- Signed compare and ordered compaction (sparse selection) ---------------------------
// A compress with a memory operand is microcoded on Zen 4: compress into a register and
// store it whole.
GRADCODEC_VINLINE mask16 vgti(vu16 a, vu16 b) { return _mm512_cmpgt_epi32_mask(a.v, b.v); }
GRADCODEC_VINLINE unsigned vcompress_store(std::uint32_t* p, mask16 m, vu16 a) {
  _mm512_storeu_si512(p, _mm512_maskz_compress_epi32(m, a.v));
  return vpopcount(m);
}

// ---- Streaming stores -------------------------------------------------------------------
GRADCODEC_VINLINE void vstream(float* p, vf16 a) { _mm512_stream_ps(p, a.v); }
GRADCODEC_VINLINE void vstream_fence() { _mm_sfence(); }

// ---- Select by lane-valued mask -----------------------------------------------------
GRADCODEC_VINLINE vf16 vselect_bits(vu16 m, vf16 a, vf16 b) {
  return {_mm512_mask_blend_ps(_mm512_movepi32_mask(m.v), b.v, a.v)};
}
