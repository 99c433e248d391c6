// SPDX-License-Identifier: Apache-2.0
//! @file
//! The 16-lane vector types every CPU kernel is written against: vf16 (16 x f32), vu16
//! (16 x u32) and mask16. Sixteen lanes are the canonical lane count of docs/codecs.md, so
//! a kernel written once gives identical results as one AVX-512 register, two AVX2
//! registers, or sixteen scalars. Included inside an ISA namespace by table_<isa>.cpp with
//! GRADCODEC_CPU_LEVEL = 0 (scalar), 1 (AVX2) or 2 (AVX-512); no std includes here.
//! All operations are lane-wise IEEE operations, so every level rounds identically.

using mask16 = std::uint16_t;

// The 16-lane helpers are always inlined in the SIMD variants: an out-of-line call passes
// vectors through memory and costs a vzeroupper (GCC left vstore_bf16 out of line, which
// made bf16 stores slower than scalar code). The scalar variant keeps plain inline: its
// helpers are 16-iteration loops, and forcing them inline multiplies its compile time.
#undef GRADCODEC_VINLINE
#if GRADCODEC_CPU_LEVEL == 0
#define GRADCODEC_VINLINE inline
#else
#define GRADCODEC_VINLINE inline __attribute__((always_inline))
#endif
// A lambda that a hot loop calls once per vector, from more than one place, is forced
// inline too: placed after its parameter list, [&](vf16 p) GRADCODEC_VLAMBDA { ... }. At -O2
// (RelWithDebInfo) GCC 12 left such lambdas out of line, and top-k's filter pass, the
// threshold encode and the quantizers' group loop then passed every vector through the stack.
#undef GRADCODEC_VLAMBDA
#define GRADCODEC_VLAMBDA __attribute__((always_inline))

#if GRADCODEC_CPU_LEVEL == 2
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
GRADCODEC_VINLINE void vstore_f16(std::uint16_t* p, vf16 a) {
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(p),
                      _mm512_cvtps_ph(a.v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}
GRADCODEC_VINLINE vu16 vload_u16(const std::uint16_t* p) {
  return {_mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)))};
}
GRADCODEC_VINLINE void vstore_u16(std::uint16_t* p, vu16 a) {
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), _mm512_cvtepi32_epi16(a.v));
}
#elif GRADCODEC_CPU_LEVEL == 1
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
GRADCODEC_VINLINE void vstore_f16(std::uint16_t* p, vf16 a) {
  _mm_storeu_si128(reinterpret_cast<__m128i*>(p),
                   _mm256_cvtps_ph(a.lo, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(p + 8),
                   _mm256_cvtps_ph(a.hi, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}
GRADCODEC_VINLINE vu16 vload_u16(const std::uint16_t* p) {
  return {_mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))),
          _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 8)))};
}
GRADCODEC_VINLINE void vstore_u16(std::uint16_t* p, vu16 a) {  // lanes hold values < 2^16
  const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(a.lo, a.hi), 0xD8);
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), packed);
}
#else
struct vf16 {
  float v[16];
};
struct vu16 {
  std::uint32_t v[16];
};

#define GRADCODEC_LANES for (int j = 0; j < 16; ++j)
// Memory goes through memcpy: kernels may hand in f32 pointers into a byte buffer (a payload
// after its header) that are not 4-byte aligned, which the SIMD levels' unaligned loads
// accept and a plain scalar access would make undefined.
GRADCODEC_VINLINE vf16 vload(const float* p) {
  vf16 r;
  std::memcpy(r.v, p, sizeof r.v);
  return r;
}
GRADCODEC_VINLINE vf16 vload_n(const float* p, unsigned n) {
  vf16 r{};
  std::memcpy(r.v, p, n * sizeof(float));
  return r;
}
GRADCODEC_VINLINE void vstore(float* p, vf16 a) { std::memcpy(p, a.v, sizeof a.v); }
GRADCODEC_VINLINE void vstore_n(float* p, vf16 a, unsigned n) {
  std::memcpy(p, a.v, n * sizeof(float));
}
GRADCODEC_VINLINE vu16 vload_u(const std::uint32_t* p) {
  vu16 r;
  std::memcpy(r.v, p, sizeof r.v);
  return r;
}
GRADCODEC_VINLINE void vstore_u(std::uint32_t* p, vu16 a) { std::memcpy(p, a.v, sizeof a.v); }
GRADCODEC_VINLINE vf16 vset1(float x) {
  vf16 r;
  GRADCODEC_LANES r.v[j] = x;
  return r;
}
GRADCODEC_VINLINE vu16 vset1u(std::uint32_t x) {
  vu16 r;
  GRADCODEC_LANES r.v[j] = x;
  return r;
}
GRADCODEC_VINLINE vf16 vzero() { return vset1(0.0f); }
#define GRADCODEC_S2(T, name, expr)  \
  inline T name(T a, T b) {          \
    T r;                             \
    GRADCODEC_LANES r.v[j] = (expr); \
    return r;                        \
  }
GRADCODEC_S2(vf16, operator+, a.v[j] + b.v[j])
GRADCODEC_S2(vf16, operator-, a.v[j] - b.v[j])
GRADCODEC_S2(vf16, operator*, a.v[j] * b.v[j])
GRADCODEC_S2(vf16, operator/, a.v[j] / b.v[j])
// Same as x86 minps/maxps: the second operand when equal or unordered.
GRADCODEC_S2(vf16, vmin, a.v[j] < b.v[j] ? a.v[j] : b.v[j])
GRADCODEC_S2(vf16, vmax, a.v[j] > b.v[j] ? a.v[j] : b.v[j])
GRADCODEC_S2(vu16, operator+, a.v[j] + b.v[j])
GRADCODEC_S2(vu16, operator-, a.v[j] - b.v[j])
GRADCODEC_S2(vu16, operator&, a.v[j] & b.v[j])
GRADCODEC_S2(vu16, operator|, a.v[j] | b.v[j])
GRADCODEC_S2(vu16, operator^, a.v[j] ^ b.v[j])
GRADCODEC_S2(vu16, vminu, a.v[j] < b.v[j] ? a.v[j] : b.v[j])
#undef GRADCODEC_S2
GRADCODEC_VINLINE vf16 vsqrt(vf16 a) {
  vf16 r;
  GRADCODEC_LANES r.v[j] = std::sqrt(a.v[j]);
  return r;
}
GRADCODEC_VINLINE vf16 vfma(vf16 a, vf16 b, vf16 c) {
  vf16 r;
  GRADCODEC_LANES r.v[j] = std::fma(a.v[j], b.v[j], c.v[j]);
  return r;
}
GRADCODEC_VINLINE vf16 vfloor(vf16 a) {
  vf16 r;
  GRADCODEC_LANES r.v[j] = std::floor(a.v[j]);
  return r;
}
GRADCODEC_VINLINE vu16 vbits(vf16 a) {
  vu16 r;
  std::memcpy(r.v, a.v, 64);
  return r;
}
GRADCODEC_VINLINE vf16 vfrombits(vu16 a) {
  vf16 r;
  std::memcpy(r.v, a.v, 64);
  return r;
}
#define GRADCODEC_SM(T, name, expr)             \
  GRADCODEC_VINLINE mask16 name(T a, T b) {     \
    unsigned m = 0;                             \
    GRADCODEC_LANES m |= (expr) ? 1u << j : 0u; \
    return static_cast<mask16>(m);              \
  }
GRADCODEC_SM(vf16, vlt, a.v[j] < b.v[j])
GRADCODEC_SM(vf16, vle, a.v[j] <= b.v[j])
GRADCODEC_SM(vf16, veq, a.v[j] == b.v[j])
GRADCODEC_SM(vu16, vltu, a.v[j] < b.v[j])
GRADCODEC_SM(vu16, vequ, a.v[j] == b.v[j])
#undef GRADCODEC_SM
GRADCODEC_VINLINE vf16 vselect(mask16 m, vf16 a, vf16 b) {
  vf16 r;
  GRADCODEC_LANES r.v[j] = (m >> j) & 1u ? a.v[j] : b.v[j];
  return r;
}
GRADCODEC_VINLINE vu16 vselectu(mask16 m, vu16 a, vu16 b) {
  vu16 r;
  GRADCODEC_LANES r.v[j] = (m >> j) & 1u ? a.v[j] : b.v[j];
  return r;
}
GRADCODEC_VINLINE vu16 vshl(vu16 a, unsigned s) {
  vu16 r;
  GRADCODEC_LANES r.v[j] = a.v[j] << s;
  return r;
}
GRADCODEC_VINLINE vu16 vshr(vu16 a, unsigned s) {
  vu16 r;
  GRADCODEC_LANES r.v[j] = a.v[j] >> s;
  return r;
}
GRADCODEC_VINLINE vu16 vtrunc_u(vf16 a) {
  vu16 r;
  GRADCODEC_LANES r.v[j] = static_cast<std::uint32_t>(a.v[j]);
  return r;
}
GRADCODEC_VINLINE vf16 vto_f(vu16 a) {
  vf16 r;
  GRADCODEC_LANES r.v[j] = static_cast<float>(a.v[j]);
  return r;
}
GRADCODEC_VINLINE float vfold(vf16 a) {
  for (int h = 8; h >= 1; h /= 2)
    for (int j = 0; j < h; ++j) a.v[j] = a.v[j] + a.v[j + h];
  return a.v[0];
}
GRADCODEC_VINLINE vu16 vload_u16(const std::uint16_t* p) {
  std::uint16_t h[16];
  std::memcpy(h, p, sizeof h);
  vu16 r;
  GRADCODEC_LANES r.v[j] = h[j];
  return r;
}
GRADCODEC_VINLINE void vstore_u16(std::uint16_t* p, vu16 a) {
  std::uint16_t h[16];
  GRADCODEC_LANES h[j] = static_cast<std::uint16_t>(a.v[j]);
  std::memcpy(p, h, sizeof h);
}
GRADCODEC_VINLINE vf16 vload_f16(const std::uint16_t* p) {
  const vu16 h = vload_u16(p);
  vf16 r;
  GRADCODEC_LANES r.v[j] = blocks::f16_to_f32(static_cast<std::uint16_t>(h.v[j]));
  return r;
}
GRADCODEC_VINLINE void vstore_f16(std::uint16_t* p, vf16 a) {
  vu16 h;
  GRADCODEC_LANES h.v[j] = blocks::f32_to_f16(a.v[j]);
  vstore_u16(p, h);
}
#undef GRADCODEC_LANES
#endif

// ---- Level-independent helpers built on the primitives -------------------------------

GRADCODEC_VINLINE vf16 vabs(vf16 a) { return vfrombits(vbits(a) & vset1u(0x7FFFFFFFu)); }
//! Lanes holding NaN or +-Inf.
GRADCODEC_VINLINE mask16 vnonfinite(vf16 a) {
  const vu16 mag = vbits(a) & vset1u(0x7FFFFFFFu);
  return static_cast<mask16>(~vltu(mag, vset1u(0x7F800000u)));
}

//! if_nan in the lanes where a is NaN, otherwise elsewhere: a float compare, so AVX2 needs no
//! mask16 round trip (that made bf16 stores slower than scalar code).
#if GRADCODEC_CPU_LEVEL == 2
GRADCODEC_VINLINE vu16 vselect_nan(vf16 a, vu16 if_nan, vu16 otherwise) {
  return vselectu(_mm512_cmp_ps_mask(a.v, a.v, _CMP_UNORD_Q), if_nan, otherwise);
}
#elif GRADCODEC_CPU_LEVEL == 1
GRADCODEC_VINLINE vu16 vselect_nan(vf16 a, vu16 if_nan, vu16 otherwise) {
  return {_mm256_blendv_epi8(otherwise.lo, if_nan.lo,
                             _mm256_castps_si256(_mm256_cmp_ps(a.lo, a.lo, _CMP_UNORD_Q))),
          _mm256_blendv_epi8(otherwise.hi, if_nan.hi,
                             _mm256_castps_si256(_mm256_cmp_ps(a.hi, a.hi, _CMP_UNORD_Q)))};
}
#else
GRADCODEC_VINLINE vu16 vselect_nan(vf16 a, vu16 if_nan, vu16 otherwise) {
  vu16 r;
  for (int j = 0; j < 16; ++j) r.v[j] = a.v[j] != a.v[j] ? if_nan.v[j] : otherwise.v[j];
  return r;
}
#endif

//! NaN lanes become detail::canonical_nan_bits: what every decoder writes.
GRADCODEC_VINLINE vf16 vcanonical_nan(vf16 a) {
  return vfrombits(vselect_nan(a, vset1u(detail::canonical_nan_bits), vbits(a)));
}

//! a + b lane-wise, with blocks::fadd_nan_first's NaN: a NaN a, quieted, even when b is a NaN
//! too. An x86 add returns its first source's NaN when both are NaN, but a compiler may swap
//! the operands of a commutative add (GCC 12 did, in some error-feedback loops), so the
//! order is pinned with one vaddps in inline assembly.
#if GRADCODEC_CPU_LEVEL == 2
GRADCODEC_VINLINE vf16 vadd_nan_first(vf16 a, vf16 b) {
  __m512 r;
  asm("vaddps %2, %1, %0" : "=v"(r) : "v"(a.v), "v"(b.v));
  return {r};
}
#elif GRADCODEC_CPU_LEVEL == 1
GRADCODEC_VINLINE vf16 vadd_nan_first(vf16 a, vf16 b) {
  __m256 lo, hi;
  asm("vaddps %2, %1, %0" : "=x"(lo) : "x"(a.lo), "x"(b.lo));
  asm("vaddps %2, %1, %0" : "=x"(hi) : "x"(a.hi), "x"(b.hi));
  return {lo, hi};
}
#else
GRADCODEC_VINLINE vf16 vadd_nan_first(vf16 a, vf16 b) {
  vf16 r;
  for (int j = 0; j < 16; ++j) r.v[j] = blocks::fadd_nan_first(a.v[j], b.v[j]);
  return r;
}
#endif

//! bf16 widening is exact: the 16 bits become the top of an f32.
GRADCODEC_VINLINE vf16 vload_bf16(const std::uint16_t* p) {
  return vfrombits(vshl(vload_u16(p), 16));
}
//! f32 -> bf16 with round to nearest even, NaN kept quiet (blocks::f32_to_bf16, lane-wise).
GRADCODEC_VINLINE void vstore_bf16(std::uint16_t* p, vf16 a) {
  const vu16 x = vbits(a);
  const vu16 rounded = vshr(x + vset1u(0x7FFFu) + (vshr(x, 16) & vset1u(1u)), 16);
  const vu16 quiet = vshr(x, 16) | vset1u(0x40u);
  vstore_u16(p, vselect_nan(a, quiet, rounded));
}

//! Loads 16 values of any dtype as f32.
GRADCODEC_VINLINE vf16 vload_any(const void* base, dtype t, std::uint64_t i) {
  switch (t) {
    case dtype::f16: return vload_f16(static_cast<const std::uint16_t*>(base) + i);
    case dtype::bf16: return vload_bf16(static_cast<const std::uint16_t*>(base) + i);
    case dtype::f32: break;
  }
  return vload(static_cast<const float*>(base) + i);
}
//! Loads the first n (< 16) values of any dtype; the other lanes are +0.0.
GRADCODEC_VINLINE vf16 vload_any_n(const void* base, dtype t, std::uint64_t i, unsigned n) {
  if (t == dtype::f32) return vload_n(static_cast<const float*>(base) + i, n);
  std::uint16_t tmp[16] = {};
  std::memcpy(tmp, static_cast<const std::uint16_t*>(base) + i, n * 2u);
  return t == dtype::f16 ? vload_f16(tmp) : vload_bf16(tmp);
}
//! Stores 16 values in any dtype (rounded to nearest even for f16/bf16).
GRADCODEC_VINLINE void vstore_any(void* base, dtype t, std::uint64_t i, vf16 a) {
  switch (t) {
    case dtype::f16: vstore_f16(static_cast<std::uint16_t*>(base) + i, a); return;
    case dtype::bf16: vstore_bf16(static_cast<std::uint16_t*>(base) + i, a); return;
    case dtype::f32: break;
  }
  vstore(static_cast<float*>(base) + i, a);
}
GRADCODEC_VINLINE void vstore_any_n(void* base, dtype t, std::uint64_t i, vf16 a, unsigned n) {
  if (t == dtype::f32) return vstore_n(static_cast<float*>(base) + i, a, n);
  std::uint16_t tmp[16];
  if (t == dtype::f16)
    vstore_f16(tmp, a);
  else
    vstore_bf16(tmp, a);
  std::memcpy(static_cast<std::uint16_t*>(base) + i, tmp, n * 2u);
}

// ---- Lane-valued compare and unsigned max (quantizers, block scales) -----------------
// vlt_bits gives a < b as a lane value (all ones / zero) instead of a mask16, so kernels can
// add or mask with it directly: on AVX2 that avoids the mask16 round trip (movemask, then
// re-expansion in vselect).

#if GRADCODEC_CPU_LEVEL == 2
GRADCODEC_VINLINE vu16 vlt_bits(vf16 a, vf16 b) {
  return {_mm512_movm_epi32(_mm512_cmp_ps_mask(a.v, b.v, _CMP_LT_OQ))};
}
GRADCODEC_VINLINE vu16 vmaxu(vu16 a, vu16 b) { return {_mm512_max_epu32(a.v, b.v)}; }
GRADCODEC_VINLINE std::uint32_t vhmaxu(vu16 a) {
  return static_cast<std::uint32_t>(_mm512_reduce_max_epu32(a.v));
}
#elif GRADCODEC_CPU_LEVEL == 1
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
#else
GRADCODEC_VINLINE vu16 vlt_bits(vf16 a, vf16 b) {
  vu16 r;
  for (int j = 0; j < 16; ++j) r.v[j] = a.v[j] < b.v[j] ? 0xFFFFFFFFu : 0u;
  return r;
}
GRADCODEC_VINLINE vu16 vmaxu(vu16 a, vu16 b) {
  vu16 r;
  for (int j = 0; j < 16; ++j) r.v[j] = a.v[j] > b.v[j] ? a.v[j] : b.v[j];
  return r;
}
GRADCODEC_VINLINE std::uint32_t vhmaxu(vu16 a) {
  std::uint32_t m = 0;
  for (int j = 0; j < 16; ++j) m = a.v[j] > m ? a.v[j] : m;
  return m;
}
#endif

// ---- Lane exchange (Hadamard butterflies) ---------------------------------------------
//! Lane j of the result is lane j ^ H of a (H = 1, 2, 4, 8).

#if GRADCODEC_CPU_LEVEL == 2
template <unsigned H>
GRADCODEC_VINLINE vf16 vswap_lanes(vf16 a) {
  if constexpr (H == 1) return {_mm512_permute_ps(a.v, 0xB1)};
  if constexpr (H == 2) return {_mm512_permute_ps(a.v, 0x4E)};
  if constexpr (H == 4) return {_mm512_shuffle_f32x4(a.v, a.v, 0xB1)};
  return {_mm512_shuffle_f32x4(a.v, a.v, 0x4E)};
}
#elif GRADCODEC_CPU_LEVEL == 1
template <unsigned H>
GRADCODEC_VINLINE vf16 vswap_lanes(vf16 a) {
  if constexpr (H == 1) return {_mm256_permute_ps(a.lo, 0xB1), _mm256_permute_ps(a.hi, 0xB1)};
  if constexpr (H == 2) return {_mm256_permute_ps(a.lo, 0x4E), _mm256_permute_ps(a.hi, 0x4E)};
  if constexpr (H == 4)
    return {_mm256_permute2f128_ps(a.lo, a.lo, 0x01), _mm256_permute2f128_ps(a.hi, a.hi, 0x01)};
  return {a.hi, a.lo};
}
#else
template <unsigned H>
GRADCODEC_VINLINE vf16 vswap_lanes(vf16 a) {
  vf16 r;
  for (unsigned j = 0; j < 16; ++j) r.v[j] = a.v[j ^ H];
  return r;
}
#endif

// ---- Sixteen-entry table lookup (4-bit codes) ------------------------------------------
//! Lane j of the result is table[idx[j]] (idx < 16; table: 16 floats).

#if GRADCODEC_CPU_LEVEL == 2
GRADCODEC_VINLINE vf16 vlookup16(const float* table, vu16 idx) {
  return {_mm512_permutexvar_ps(idx.v, _mm512_loadu_ps(table))};
}
#elif GRADCODEC_CPU_LEVEL == 1
GRADCODEC_VINLINE __m256 avx2_lookup16(__m256 t0, __m256 t1, __m256i i) {
  const __m256 high = _mm256_castsi256_ps(_mm256_slli_epi32(i, 28));  // bit 3 to the sign
  return _mm256_blendv_ps(_mm256_permutevar8x32_ps(t0, i), _mm256_permutevar8x32_ps(t1, i), high);
}
GRADCODEC_VINLINE vf16 vlookup16(const float* table, vu16 idx) {
  const __m256 t0 = _mm256_loadu_ps(table), t1 = _mm256_loadu_ps(table + 8);
  return {avx2_lookup16(t0, t1, idx.lo), avx2_lookup16(t0, t1, idx.hi)};
}
#else
GRADCODEC_VINLINE vf16 vlookup16(const float* table, vu16 idx) {
  vf16 r;
  for (int j = 0; j < 16; ++j) r.v[j] = table[idx.v[j]];
  return r;
}
#endif

//! Lanes all ones where a == b (a != b), zero elsewhere: lane values for vselect_bits.
GRADCODEC_VINLINE vu16 vequ_bits(vu16 a, std::uint32_t b) {
  return vminu(a ^ vset1u(b), vset1u(1)) - vset1u(1);
}
GRADCODEC_VINLINE vu16 vneu_bits(vu16 a, std::uint32_t b) {
  return vset1u(0) - vminu(a ^ vset1u(b), vset1u(1));
}

// ---- Signed compare and ordered compaction (sparse selection) -------------------------
// vgti compares lanes as signed 32-bit integers: selection keys are below 2^31, where it
// equals the unsigned order and is one instruction on AVX2. vcompress_store writes the
// lanes selected by m, in lane order, to p[0..count) and returns count; it may also write
// p[count..16), so p must have room for 16 values. AVX-512 compresses into a register and
// stores it whole (a compress with a memory operand is microcoded on Zen 4); AVX2 permutes
// each half through a 256-entry table.

GRADCODEC_VINLINE unsigned vpopcount(mask16 m) {
  return static_cast<unsigned>(__builtin_popcount(m));
}

#if GRADCODEC_CPU_LEVEL == 2
GRADCODEC_VINLINE mask16 vgti(vu16 a, vu16 b) { return _mm512_cmpgt_epi32_mask(a.v, b.v); }
GRADCODEC_VINLINE unsigned vcompress_store(std::uint32_t* p, mask16 m, vu16 a) {
  _mm512_storeu_si512(p, _mm512_maskz_compress_epi32(m, a.v));
  return vpopcount(m);
}
#elif GRADCODEC_CPU_LEVEL == 1
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
#else
GRADCODEC_VINLINE mask16 vgti(vu16 a, vu16 b) {
  unsigned m = 0;
  for (int j = 0; j < 16; ++j)
    m |= static_cast<std::int32_t>(a.v[j]) > static_cast<std::int32_t>(b.v[j]) ? 1u << j : 0u;
  return static_cast<mask16>(m);
}
GRADCODEC_VINLINE unsigned vcompress_store(std::uint32_t* p, mask16 m, vu16 a) {
  unsigned c = 0;
  for (int j = 0; j < 16; ++j)
    if ((m >> j) & 1u) p[c++] = a.v[j];
  return c;
}
#endif

// ---- Streaming stores (large decode outputs) -------------------------------------------
// vstream stores 16 f32 values at a 64-byte aligned p, bypassing the caches where the level
// can (a write-only output larger than the caches then costs no read-for-ownership).
// Stores made with it are weakly ordered: a task that used it calls vstream_fence() before
// it ends, so the caller sees the values after the join. Values are those of vstore.

//! Outputs at least this large are written with vstream (sign, the vote, and the staged
//! writes of cpu/kernels/staged-inl.hpp: sparse decode, casts): larger
//! than the caches, they would be evicted before use anyway, and skipping the
//! read-for-ownership of every output line is most of the write bandwidth.
inline constexpr std::uint64_t stream_store_bytes = std::uint64_t{1} << 24;

//! Elements of `size` bytes from p (aligned to size) to the next 64-byte boundary, where
//! whole-line streaming stores can start.
inline std::uint64_t elements_to_line(const void* p, std::size_t size) {
  const auto addr = reinterpret_cast<std::uintptr_t>(p);
  return (64 - addr % 64) % 64 / size;
}

#if GRADCODEC_CPU_LEVEL == 2
GRADCODEC_VINLINE void vstream(float* p, vf16 a) { _mm512_stream_ps(p, a.v); }
GRADCODEC_VINLINE void vstream_fence() { _mm_sfence(); }
#elif GRADCODEC_CPU_LEVEL == 1
GRADCODEC_VINLINE void vstream(float* p, vf16 a) {
  _mm256_stream_ps(p, a.lo);
  _mm256_stream_ps(p + 8, a.hi);
}
GRADCODEC_VINLINE void vstream_fence() { _mm_sfence(); }
#else
GRADCODEC_VINLINE void vstream(float* p, vf16 a) { vstore(p, a); }
GRADCODEC_VINLINE void vstream_fence() {}
#endif

// ---- Loads and stores of a dtype fixed at compile time -------------------------------
//! Prefetches element i of a tensor of dtype t; Locality as in __builtin_prefetch (1: into
//! L2, 3: into L1). Integer arithmetic: the address may lie past the end (a prefetch never
//! faults).
template <int Locality>
GRADCODEC_VINLINE void prefetch_element(const void* base, dtype t, std::uint64_t i) {
  const std::uintptr_t at = reinterpret_cast<std::uintptr_t>(base) + i * dtype_size(t);
  __builtin_prefetch(reinterpret_cast<const void*>(at), 0, Locality);
}

// The same values as vload_any / vstore_any, without the run-time switch: small enough to
// be inlined into hot loops (GCC does not inline the switching versions there).

template <dtype T>
GRADCODEC_VINLINE vf16 vload_typed(const void* base, std::uint64_t i) {
  if constexpr (T == dtype::f32)
    return vload(static_cast<const float*>(base) + i);
  else if constexpr (T == dtype::f16)
    return vload_f16(static_cast<const std::uint16_t*>(base) + i);
  else
    return vload_bf16(static_cast<const std::uint16_t*>(base) + i);
}
template <dtype T>
GRADCODEC_VINLINE vf16 vload_typed_n(const void* base, std::uint64_t i, unsigned n) {
  if constexpr (T == dtype::f32)
    return vload_n(static_cast<const float*>(base) + i, n);
  else
    return vload_any_n(base, T, i, n);
}
template <dtype T>
GRADCODEC_VINLINE void vstore_typed(void* base, std::uint64_t i, vf16 a) {
  if constexpr (T == dtype::f32)
    vstore(static_cast<float*>(base) + i, a);
  else if constexpr (T == dtype::f16)
    vstore_f16(static_cast<std::uint16_t*>(base) + i, a);
  else
    vstore_bf16(static_cast<std::uint16_t*>(base) + i, a);
}
template <dtype T>
GRADCODEC_VINLINE void vstore_typed_n(void* base, std::uint64_t i, vf16 a, unsigned n) {
  if constexpr (T == dtype::f32)
    vstore_n(static_cast<float*>(base) + i, a, n);
  else
    vstore_any_n(base, T, i, a, n);
}
//! fn.template operator()<T>() for the run-time dtype t.
template <class Fn>
GRADCODEC_VINLINE void with_dtype(dtype t, Fn&& fn) {
  switch (t) {
    case dtype::f32: fn.template operator()<dtype::f32>(); break;
    case dtype::f16: fn.template operator()<dtype::f16>(); break;
    case dtype::bf16: fn.template operator()<dtype::bf16>(); break;
  }
}

// ---- Select by lane-valued mask -----------------------------------------------------
// vselect_bits(m, a, b): a where lane m is all ones, b where it is zero (the lanes vlt_bits
// gives; other values are not allowed). Unlike vselect it keeps the mask in a vector
// register: on AVX2 a mask16 built by vlt and expanded again by vselect goes through a
// general register (and, with a 16-bit spill, a store-forwarding stall).

#if GRADCODEC_CPU_LEVEL == 2
GRADCODEC_VINLINE vf16 vselect_bits(vu16 m, vf16 a, vf16 b) {
  return {_mm512_mask_blend_ps(_mm512_movepi32_mask(m.v), b.v, a.v)};
}
#elif GRADCODEC_CPU_LEVEL == 1
GRADCODEC_VINLINE vf16 vselect_bits(vu16 m, vf16 a, vf16 b) {
  return {_mm256_blendv_ps(b.lo, a.lo, _mm256_castsi256_ps(m.lo)),
          _mm256_blendv_ps(b.hi, a.hi, _mm256_castsi256_ps(m.hi))};
}
#else
GRADCODEC_VINLINE vf16 vselect_bits(vu16 m, vf16 a, vf16 b) {
  vf16 r;
  for (int j = 0; j < 16; ++j) r.v[j] = m.v[j] != 0 ? a.v[j] : b.v[j];
  return r;
}
#endif
