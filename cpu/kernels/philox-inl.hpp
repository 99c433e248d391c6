// SPDX-License-Identifier: Apache-2.0
//! @file
//! Philox4x32-10 for 16 consecutive numbers of one stream: philox16(g, i) holds
//! rng.at(stream, i + j) in lane j, bit-identical to blocks/philox.hpp. Included inside an
//! ISA namespace (see cpu/table-inl.hpp) after simd-inl.hpp.
//!
//! Only the four blocks that hold the 16 numbers are computed (block b gives numbers
//! 4b..4b+3). SIMD levels keep the blocks "structure of arrays" in 64-bit lanes: word w of
//! block q sits in the low half of 64-bit lane q of register c[w], so one vpmuludq gives the
//! full 32x32->64 products of four blocks, and high halves may hold garbage that no later
//! step reads (vpmuludq ignores them; the final transpose masks them off).

//! Per-call constants of one (context, stream): the round keys and the fixed counter words.
struct philox16_gen {
  blocks::counter_rng rng;
  blocks::rng_stream stream;
#if GRADCODEC_CPU_LEVEL >= 1
  // Round r xors k0 + r*W0 into word 0 and k1 + r*W1 into word 2.
  __m256i k0[10], k1[10];
  __m256i c1_xor;    // stream << 24, xored into the high word of the block index
  __m256i r0_word0;  // round 0: hi(M1 * step_lo) ^ k0, the part of new word 0 fixed per call
  __m256i r0_c1;     // round 0: M1 * step_lo, whose low half is word 1 after round 0
  __m256i r0_word2;  // round 0: tensor_lo ^ k1
#endif
};

inline philox16_gen philox16_make(const blocks::counter_rng& rng, blocks::rng_stream s) {
  philox16_gen g;
  g.rng = rng;
  g.stream = s;
#if GRADCODEC_CPU_LEVEL >= 1
  std::uint32_t k0 = rng.key.k0, k1 = rng.key.k1;
  for (int r = 0; r < 10; ++r) {
    g.k0[r] = _mm256_set1_epi32(static_cast<int>(k0));
    g.k1[r] = _mm256_set1_epi32(static_cast<int>(k1));
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  g.c1_xor = _mm256_set1_epi32(static_cast<int>(static_cast<std::uint32_t>(s) << 24));
  // Words 2 and 3 of every counter are step_lo and tensor_lo, so round 0's second product
  // and its word-2 xor are the same for every block.
  const std::uint64_t p1 = std::uint64_t{0xCD9E8D57u} * rng.step_lo;
  g.r0_c1 = _mm256_set1_epi64x(static_cast<long long>(p1));
  g.r0_word0 =
      _mm256_set1_epi32(static_cast<int>(static_cast<std::uint32_t>(p1 >> 32) ^ rng.key.k0));
  g.r0_word2 = _mm256_set1_epi32(static_cast<int>(rng.tensor_lo ^ rng.key.k1));
#endif
  return g;
}

#if GRADCODEC_CPU_LEVEL >= 1
//! a ^ b ^ c (one vpternlogd on AVX-512).
inline __m256i philox_xor3(__m256i a, __m256i b, __m256i c) {
#if GRADCODEC_CPU_LEVEL == 2
  return _mm256_ternarylogic_epi32(a, b, c, 0x96);
#else
  return _mm256_xor_si256(_mm256_xor_si256(a, b), c);
#endif
}

//! Numbers 4*b0 .. 4*b0 + 16K - 1 of the stream, 16 per pair of registers (out_lo[k]: the
//! numbers 16k .. 16k+7, out_hi[k]: 16k+8 .. 16k+15). K independent chains overlap their
//! multiply latencies.
template <unsigned K>
inline void philox16_blocks_k(const philox16_gen& g, std::uint64_t b0, __m256i* out_lo,
                              __m256i* out_hi) {
  const __m256i m0 = _mm256_set1_epi64x(0xD2511F53), m1 = _mm256_set1_epi64x(0xCD9E8D57);
  __m256i c0[K], c1[K], c2[K], c3[K];
  for (unsigned k = 0; k < K; ++k) {
    const __m256i index = _mm256_add_epi64(_mm256_set1_epi64x(static_cast<long long>(b0 + 4 * k)),
                                           _mm256_setr_epi64x(0, 1, 2, 3));
    const __m256i p0 = _mm256_mul_epu32(index, m0);
    c0[k] = _mm256_xor_si256(g.r0_word0, _mm256_xor_si256(_mm256_srli_epi64(index, 32), g.c1_xor));
    c1[k] = g.r0_c1;
    c2[k] = _mm256_xor_si256(_mm256_srli_epi64(p0, 32), g.r0_word2);
    c3[k] = p0;
  }
  for (int r = 1; r < 10; ++r) {
    for (unsigned k = 0; k < K; ++k) {
      const __m256i p0 = _mm256_mul_epu32(c0[k], m0);
      const __m256i p1 = _mm256_mul_epu32(c2[k], m1);
      c0[k] = philox_xor3(_mm256_srli_epi64(p1, 32), c1[k], g.k0[r]);
      c2[k] = philox_xor3(_mm256_srli_epi64(p0, 32), c3[k], g.k1[r]);
      c1[k] = p1;
      c3[k] = p0;
    }
  }
  for (unsigned k = 0; k < K; ++k) {
    const __m256i w01 = _mm256_blend_epi32(c0[k], _mm256_slli_epi64(c1[k], 32), 0xAA);
    const __m256i w23 = _mm256_blend_epi32(c2[k], _mm256_slli_epi64(c3[k], 32), 0xAA);
    const __m256i b02 = _mm256_unpacklo_epi64(w01, w23), b13 = _mm256_unpackhi_epi64(w01, w23);
    out_lo[k] = _mm256_permute2x128_si256(b02, b13, 0x20);
    out_hi[k] = _mm256_permute2x128_si256(b02, b13, 0x31);
  }
}
#endif

//! rng.at(stream, i + j) in lane j, for i a multiple of 4.
inline vu16 philox16(const philox16_gen& g, std::uint64_t i) {
#if GRADCODEC_CPU_LEVEL >= 1
  __m256i lo, hi;
  philox16_blocks_k<1>(g, i >> 2, &lo, &hi);
#if GRADCODEC_CPU_LEVEL == 2
  return {_mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1)};
#else
  return {lo, hi};
#endif
#else
  vu16 r;
  for (int q = 0; q < 4; ++q) {
    const blocks::philox_block b = g.rng.block(g.stream, (i >> 2) + static_cast<std::uint64_t>(q));
    for (int w = 0; w < 4; ++w) r.v[4 * q + w] = b.v[w];
  }
  return r;
#endif
}

//! rng.at(stream, i + j) in lane j for any i (two aligned calls when i is not a multiple of 4).
inline vu16 philox16_any(const philox16_gen& g, std::uint64_t i) {
  const unsigned skew = static_cast<unsigned>(i & 3u);
  if (skew == 0) return philox16(g, i);
  std::uint32_t tmp[32];
  vstore_u(tmp, philox16(g, i - skew));
  vstore_u(tmp + 16, philox16(g, i - skew + 16));
  return vload_u(tmp + skew);
}

//! uniform01 of blocks/philox.hpp, lane-wise: (r >> 8) * 2^-24, exact.
inline vf16 vuniform01(vu16 r) { return vto_f(vshr(r, 8)) * vset1(0x1p-24f); }

//! Groups of 16 numbers that philox_uniforms draws per step. Eight chains keep the multiply
//! units busy: drawn alone, 2^26 numbers took 37 ms with eight chains on the AVX2 VM, 41 ms
//! with two and 49 ms with one (docs/performance.md, "Stochastic rounding").
inline constexpr std::uint64_t philox_uniform_step = GRADCODEC_CPU_LEVEL >= 1 ? 8 : 1;

//! u[16j + l] = uniform01(rng.at(stream, i + 16j + l)) for j < groups rounded up to a
//! multiple of philox_uniform_step (u must hold that many), i a multiple of 4. Drawing a
//! run of uniforms in a loop of its own leaves the Philox chains every register; the
//! consumer reads them back from L1.
inline void philox_uniforms(const philox16_gen& g, std::uint64_t i, std::uint64_t groups,
                            float* u) {
  for (std::uint64_t j = 0; j < groups; j += philox_uniform_step, u += 16 * philox_uniform_step) {
#if GRADCODEC_CPU_LEVEL >= 1
    constexpr unsigned K = philox_uniform_step;
    __m256i lo[K], hi[K];
    philox16_blocks_k<K>(g, (i + 16 * j) >> 2, lo, hi);
    for (unsigned k = 0; k < K; ++k) {
#if GRADCODEC_CPU_LEVEL == 2
      const vu16 r{_mm512_inserti64x4(_mm512_castsi256_si512(lo[k]), hi[k], 1)};
#else
      const vu16 r{lo[k], hi[k]};
#endif
      vstore(u + 16 * k, vuniform01(r));
    }
#else
    vstore(u, vuniform01(philox16(g, i + 16 * j)));
#endif
  }
}
