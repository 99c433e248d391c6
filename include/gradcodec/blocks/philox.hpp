// SPDX-License-Identifier: Apache-2.0
//! @file
//! Philox4x32-10 (Salmon et al., SC'11), the counter-based generator behind every random
//! decision a codec makes. Keyed by (seed, step, tensor id) and counted by element index,
//! so reference, every CPU ISA, every thread count and CUDA draw identical numbers.
#pragma once

#include <cstdint>

#include "gradcodec/blocks/config.hpp"

namespace gradcodec::blocks {

struct philox_key {
  std::uint32_t k0, k1;
};

struct philox_block {
  std::uint32_t v[4];
};

//! Random streams: distinct decisions of one codec never reuse numbers.
enum class rng_stream : std::uint32_t {
  rounding = 0,   //!< stochastic rounding, one number per element
  selection = 1,  //!< random-k stratum offsets, one number per stratum
  sampling = 2,   //!< DGC sample start
  init = 3,       //!< PowerSGD initial Q
  rotation = 4,   //!< block-scaled codecs: Hadamard sign flips, one number per 32 elements
};

GRADCODEC_HD std::uint32_t mulhilo32(std::uint32_t a, std::uint32_t b, std::uint32_t& hi) {
  const std::uint64_t p = static_cast<std::uint64_t>(a) * b;
  hi = static_cast<std::uint32_t>(p >> 32);
  return static_cast<std::uint32_t>(p);
}

//! Ten rounds of Philox4x32 on counter c with key k.
GRADCODEC_HD philox_block philox4x32_10(philox_block c, philox_key k) {
  constexpr std::uint32_t M0 = 0xD2511F53u, M1 = 0xCD9E8D57u;
  constexpr std::uint32_t W0 = 0x9E3779B9u, W1 = 0xBB67AE85u;
  for (int r = 0; r < 10; ++r) {
    std::uint32_t hi0, hi1;
    const std::uint32_t lo0 = mulhilo32(M0, c.v[0], hi0);
    const std::uint32_t lo1 = mulhilo32(M1, c.v[2], hi1);
    c = philox_block{{hi1 ^ c.v[1] ^ k.k0, lo1, hi0 ^ c.v[3] ^ k.k1, lo0}};
    k.k0 += W0;
    k.k1 += W1;
  }
  return c;
}

//! The generator of one (seed, step, tensor id) context. Number i of a stream is output
//! (i mod 4) of the block with counter (i/4 low word, i/4 high word ^ stream<<24,
//! step low word, tensor low word); the high words of step and tensor id fold into the key.
struct counter_rng {
  philox_key key;
  std::uint32_t step_lo, tensor_lo;

  GRADCODEC_HD static counter_rng make(std::uint64_t seed, std::uint64_t step,
                                       std::uint64_t tensor_id) {
    counter_rng g{};
    g.key.k0 = static_cast<std::uint32_t>(seed) ^ static_cast<std::uint32_t>(step >> 32);
    g.key.k1 = static_cast<std::uint32_t>(seed >> 32) ^ static_cast<std::uint32_t>(tensor_id >> 32);
    g.step_lo = static_cast<std::uint32_t>(step);
    g.tensor_lo = static_cast<std::uint32_t>(tensor_id);
    return g;
  }

  //! The four numbers i = 4*block .. 4*block+3 of a stream.
  GRADCODEC_HD philox_block block(rng_stream s, std::uint64_t block_index) const {
    philox_block c{
        {static_cast<std::uint32_t>(block_index),
         static_cast<std::uint32_t>(block_index >> 32) ^ (static_cast<std::uint32_t>(s) << 24),
         step_lo, tensor_lo}};
    return philox4x32_10(c, key);
  }

  //! Number i of a stream.
  GRADCODEC_HD std::uint32_t at(rng_stream s, std::uint64_t i) const {
    return block(s, i >> 2).v[i & 3];
  }
};

//! A uniform float in [0, 1) from the top 24 bits: exact, the same on every backend.
GRADCODEC_HD float uniform01(std::uint32_t r) { return static_cast<float>(r >> 8) * 0x1p-24f; }

//! floor(r * m / 2^32): an unbiased-enough integer in [0, m) without division.
GRADCODEC_HD std::uint64_t scale_u32(std::uint32_t r, std::uint64_t m) {
  // Exact for any m: a random-k stratum or DGC stride reaches 2^48 when k or the sample is
  // small, so m is split in 32-bit halves (r * m_hi * 2^32 / 2^32 is exact, no product
  // exceeds 64 bits). For m < 2^32 this is (r * m) >> 32.
  const std::uint64_t r64 = r;
  return r64 * (m >> 32) + ((r64 * (m & 0xFFFFFFFFu)) >> 32);
}

//! The 16 bytes of generator key material a frame carries so that decoding needs no
//! context (random-k, rotated block-scaled frames): little-endian k0, k1, step low,
//! tensor low.
GRADCODEC_HD void write_rng_key(const counter_rng& rng, std::uint8_t* at) {
  const std::uint32_t w[4] = {rng.key.k0, rng.key.k1, rng.step_lo, rng.tensor_lo};
  for (int i = 0; i < 16; ++i) at[i] = static_cast<std::uint8_t>(w[i / 4] >> (8 * (i % 4)));
}
GRADCODEC_HD counter_rng read_rng_key(const std::uint8_t* at) {
  std::uint32_t w[4] = {0, 0, 0, 0};
  for (int i = 0; i < 16; ++i) w[i / 4] |= static_cast<std::uint32_t>(at[i]) << (8 * (i % 4));
  counter_rng rng{};
  rng.key.k0 = w[0];
  rng.key.k1 = w[1];
  rng.step_lo = w[2];
  rng.tensor_lo = w[3];
  return rng;
}

}  // namespace gradcodec::blocks
