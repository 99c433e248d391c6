// SPDX-License-Identifier: Apache-2.0
//! @file
//! vh16 (16 x u16, cpu/simd/scalar-inl.hpp) as one __m256i: the operations AVX2 and AVX-512
//! share. Included by cpu/simd/avx2-inl.hpp and cpu/simd/avx512-inl.hpp, which add the
//! select and the conversion to f32 their own way.

struct vh16 {
  __m256i v;
};
GRADCODEC_VINLINE vh16 vload_i8_h(const std::uint8_t* p) {
  return {_mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)))};
}
GRADCODEC_VINLINE vh16 vset1h(std::uint16_t x) {
  return {_mm256_set1_epi16(static_cast<short>(x))};
}
GRADCODEC_VINLINE vh16 operator&(vh16 a, vh16 b) { return {_mm256_and_si256(a.v, b.v)}; }
GRADCODEC_VINLINE vh16 operator|(vh16 a, vh16 b) { return {_mm256_or_si256(a.v, b.v)}; }
GRADCODEC_VINLINE vh16 vshl(vh16 a, unsigned s) {
  return {_mm256_slli_epi16(a.v, static_cast<int>(s))};
}
