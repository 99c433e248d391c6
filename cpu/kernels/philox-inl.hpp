// SPDX-License-Identifier: Apache-2.0
//! @file
//! Philox4x32-10 for 16 consecutive numbers of one stream: philox16(g, i) holds
//! rng.at(stream, i + j) in lane j, bit-identical to blocks/philox.hpp. Included inside an
//! ISA namespace (see cpu/table-inl.hpp) after simd-inl.hpp.
//!
//! Block b gives numbers 4b..4b+3. SIMD levels keep the blocks "structure of arrays" in
//! 64-bit lanes: word w of block q sits in the low half of 64-bit lane q of register c[w], so
//! one vpmuludq gives the full 32x32->64 products of four (AVX2) or eight (AVX-512) blocks,
//! and high halves may hold garbage that no later step reads (vpmuludq ignores them; the
//! final transpose masks them off).

#if GRADCODEC_CPU_LEVEL == 2
//! One register of a Philox chain: 8 blocks (32 numbers) in 64-bit lanes. Zen 4 runs a
//! 512-bit vpmuludq at the rate of a 256-bit one: 2^26 numbers took 23 ms in 512-bit
//! chains against 37 ms in 256-bit ones.
using philox_reg = __m512i;
inline constexpr unsigned philox_reg_blocks = 8;
inline philox_reg philox_set1_32(std::uint32_t x) { return _mm512_set1_epi32(static_cast<int>(x)); }
inline philox_reg philox_set1_64(std::uint64_t x) {
  return _mm512_set1_epi64(static_cast<long long>(x));
}
inline philox_reg philox_iota() { return _mm512_setr_epi64(0, 1, 2, 3, 4, 5, 6, 7); }
inline philox_reg philox_add64(philox_reg a, philox_reg b) { return _mm512_add_epi64(a, b); }
inline philox_reg philox_mul(philox_reg a, philox_reg b) { return _mm512_mul_epu32(a, b); }
inline philox_reg philox_hi(philox_reg a) { return _mm512_srli_epi64(a, 32); }
inline philox_reg philox_xor(philox_reg a, philox_reg b) { return _mm512_xor_si512(a, b); }
inline philox_reg philox_xor3(philox_reg a, philox_reg b, philox_reg c) {
  return _mm512_ternarylogic_epi32(a, b, c, 0x96);
}
//! Words w0..w3 of blocks 0-7 (64-bit lane q: block q) to the numbers in order: out[0] holds
//! blocks 0-3, out[1] blocks 4-7.
inline void philox_transpose(philox_reg c0, philox_reg c1, philox_reg c2, philox_reg c3,
                             vu16* out) {
  const __m512i w01 = _mm512_mask_blend_epi32(0xAAAA, c0, _mm512_slli_epi64(c1, 32));
  const __m512i w23 = _mm512_mask_blend_epi32(0xAAAA, c2, _mm512_slli_epi64(c3, 32));
  const __m512i even = _mm512_unpacklo_epi64(w01, w23);  // 128-bit lane l: block 2l
  const __m512i odd = _mm512_unpackhi_epi64(w01, w23);   // block 2l + 1
  out[0] = {_mm512_permutex2var_epi64(even, _mm512_setr_epi64(0, 1, 8, 9, 2, 3, 10, 11), odd)};
  out[1] = {_mm512_permutex2var_epi64(even, _mm512_setr_epi64(4, 5, 12, 13, 6, 7, 14, 15), odd)};
}
#elif GRADCODEC_CPU_LEVEL == 1
//! One register of a Philox chain: 4 blocks (16 numbers) in 64-bit lanes.
using philox_reg = __m256i;
inline constexpr unsigned philox_reg_blocks = 4;
inline philox_reg philox_set1_32(std::uint32_t x) { return _mm256_set1_epi32(static_cast<int>(x)); }
inline philox_reg philox_set1_64(std::uint64_t x) {
  return _mm256_set1_epi64x(static_cast<long long>(x));
}
inline philox_reg philox_iota() { return _mm256_setr_epi64x(0, 1, 2, 3); }
inline philox_reg philox_add64(philox_reg a, philox_reg b) { return _mm256_add_epi64(a, b); }
inline philox_reg philox_mul(philox_reg a, philox_reg b) { return _mm256_mul_epu32(a, b); }
inline philox_reg philox_hi(philox_reg a) { return _mm256_srli_epi64(a, 32); }
inline philox_reg philox_xor(philox_reg a, philox_reg b) { return _mm256_xor_si256(a, b); }
inline philox_reg philox_xor3(philox_reg a, philox_reg b, philox_reg c) {
  return _mm256_xor_si256(_mm256_xor_si256(a, b), c);
}
//! Words w0..w3 of blocks 0-3 (64-bit lane q: block q) to the numbers in order.
inline void philox_transpose(philox_reg c0, philox_reg c1, philox_reg c2, philox_reg c3,
                             vu16* out) {
  const __m256i w01 = _mm256_blend_epi32(c0, _mm256_slli_epi64(c1, 32), 0xAA);
  const __m256i w23 = _mm256_blend_epi32(c2, _mm256_slli_epi64(c3, 32), 0xAA);
  const __m256i b02 = _mm256_unpacklo_epi64(w01, w23), b13 = _mm256_unpackhi_epi64(w01, w23);
  out[0] = {_mm256_permute2x128_si256(b02, b13, 0x20), _mm256_permute2x128_si256(b02, b13, 0x31)};
}
#endif

#if GRADCODEC_CPU_LEVEL >= 1
//! Groups of 16 numbers one chain register holds.
inline constexpr unsigned philox_reg_groups = philox_reg_blocks / 4;
#endif

//! Per-call constants of one (context, stream): the round keys and the fixed counter words.
struct philox16_gen {
  blocks::counter_rng rng;
  blocks::rng_stream stream;
#if GRADCODEC_CPU_LEVEL >= 1
  // Round r xors k0 + r*W0 into word 0 and k1 + r*W1 into word 2.
  philox_reg k0[10], k1[10];
  philox_reg c1_xor;    // stream << 24, xored into the high word of the block index
  philox_reg r0_word0;  // round 0: hi(M1 * step_lo) ^ k0, the part of new word 0 fixed per call
  philox_reg r0_c1;     // round 0: M1 * step_lo, whose low half is word 1 after round 0
  philox_reg r0_word2;  // round 0: tensor_lo ^ k1
#endif
};

inline philox16_gen philox16_make(const blocks::counter_rng& rng, blocks::rng_stream s) {
  philox16_gen g;
  g.rng = rng;
  g.stream = s;
#if GRADCODEC_CPU_LEVEL >= 1
  std::uint32_t k0 = rng.key.k0, k1 = rng.key.k1;
  for (int r = 0; r < 10; ++r) {
    g.k0[r] = philox_set1_32(k0);
    g.k1[r] = philox_set1_32(k1);
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  g.c1_xor = philox_set1_32(static_cast<std::uint32_t>(s) << 24);
  // Words 2 and 3 of every counter are step_lo and tensor_lo, so round 0's second product
  // and its word-2 xor are the same for every block.
  const std::uint64_t p1 = std::uint64_t{0xCD9E8D57u} * rng.step_lo;
  g.r0_c1 = philox_set1_64(p1);
  g.r0_word0 = philox_set1_32(static_cast<std::uint32_t>(p1 >> 32) ^ rng.key.k0);
  g.r0_word2 = philox_set1_32(rng.tensor_lo ^ rng.key.k1);
#endif
  return g;
}

#if GRADCODEC_CPU_LEVEL >= 1
//! Numbers 4*b0 .. 4*b0 + 16 * K * philox_reg_groups - 1 of the stream: out[j] holds the 16
//! from 4*b0 + 16j. K independent chains overlap their multiply latencies.
template <unsigned K>
inline void philox_chains(const philox16_gen& g, std::uint64_t b0, vu16* out) {
  const philox_reg m0 = philox_set1_64(0xD2511F53), m1 = philox_set1_64(0xCD9E8D57);
  philox_reg c0[K], c1[K], c2[K], c3[K];
  for (unsigned k = 0; k < K; ++k) {
    const philox_reg index =
        philox_add64(philox_set1_64(b0 + philox_reg_blocks * k), philox_iota());
    const philox_reg p0 = philox_mul(index, m0);
    c0[k] = philox_xor3(g.r0_word0, philox_hi(index), g.c1_xor);
    c1[k] = g.r0_c1;
    c2[k] = philox_xor(philox_hi(p0), g.r0_word2);
    c3[k] = p0;
  }
  for (int r = 1; r < 10; ++r) {
    for (unsigned k = 0; k < K; ++k) {
      const philox_reg p0 = philox_mul(c0[k], m0);
      const philox_reg p1 = philox_mul(c2[k], m1);
      c0[k] = philox_xor3(philox_hi(p1), c1[k], g.k0[r]);
      c2[k] = philox_xor3(philox_hi(p0), c3[k], g.k1[r]);
      c1[k] = p1;
      c3[k] = p0;
    }
  }
  for (unsigned k = 0; k < K; ++k)
    philox_transpose(c0[k], c1[k], c2[k], c3[k], out + k * philox_reg_groups);
}
#endif

//! rng.at(stream, i + j) in lane j, for i a multiple of 4.
inline vu16 philox16(const philox16_gen& g, std::uint64_t i) {
#if GRADCODEC_CPU_LEVEL >= 1
  vu16 out[philox_reg_groups];
  philox_chains<1>(g, i >> 2, out);
  return out[0];
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

//! Groups of 16 numbers that philox_uniforms draws per step: eight 256-bit chains (AVX2) or
//! four 512-bit ones (AVX-512) keep the multipliers busy. Drawn alone on the Zen 4 VM, 2^26
//! numbers took 37 ms in eight 256-bit chains, 41 ms in two and 49 ms in one; 23 ms in four
//! 512-bit chains, 32 ms in eight (spilled registers) (docs/performance.md, "Stochastic
//! rounding").
inline constexpr std::uint64_t philox_uniform_step = GRADCODEC_CPU_LEVEL >= 1 ? 8 : 1;

//! u[16j + l] = uniform01(rng.at(stream, i + 16j + l)) for j < groups rounded up to a
//! multiple of philox_uniform_step (u must hold that many), i a multiple of 4. Drawing a
//! run of uniforms in a loop of its own leaves the Philox chains every register; the
//! consumer reads them back from L1.
inline void philox_uniforms(const philox16_gen& g, std::uint64_t i, std::uint64_t groups,
                            float* u) {
  for (std::uint64_t j = 0; j < groups; j += philox_uniform_step, u += 16 * philox_uniform_step) {
#if GRADCODEC_CPU_LEVEL >= 1
    vu16 r[philox_uniform_step];
    philox_chains<philox_uniform_step / philox_reg_groups>(g, (i + 16 * j) >> 2, r);
    for (unsigned k = 0; k < philox_uniform_step; ++k) vstore(u + 16 * k, vuniform01(r[k]));
#else
    vstore(u, vuniform01(philox16(g, i + 16 * j)));
#endif
  }
}
