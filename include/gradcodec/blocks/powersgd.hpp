// SPDX-License-Identifier: Apache-2.0
//! @file
//! PowerSGD's arithmetic (docs/codecs.md "powersgd") as __host__ __device__ pieces: an
//! entry of the shared-seed initial Q, the orthogonalization (modified Gram-Schmidt with a
//! second pass) over a reducer (one thread, or a warp with blocks/warp.cuh), and the
//! canonical-sum products. Every operation is one f32 rounding, as the reference's.
#pragma once

#include <cstdint>

#include "gradcodec/blocks/canonical_sum.hpp"
#include "gradcodec/blocks/config.hpp"
#include "gradcodec/blocks/fmath.hpp"
#include "gradcodec/blocks/philox.hpp"

namespace gradcodec::blocks {

//! Entry e = j * r + c of the initial Q before orthogonalization: Irwin-Hall of four
//! uniforms of block e of the init stream, scaled to variance 1. `rng` is made with step 0.
GRADCODEC_HD float powersgd_init_entry(const counter_rng& rng, std::uint64_t e) {
  const philox_block b = rng.block(rng_stream::init, e);
  const float s =
      fadd(fadd(uniform01(b.v[0]), uniform01(b.v[1])), fadd(uniform01(b.v[2]), uniform01(b.v[3])));
  return fmul(fsub(s, 2.0f), 1.7320508f);
}

//! orth(a, m, r, eps) in place, a row-major m x r.
template <class Reducer = sequential_reducer>
GRADCODEC_HD void powersgd_orthogonalize(float* a, std::uint64_t m, std::uint32_t r, float eps,
                                         Reducer red = {}) {
  for (std::uint32_t j = 0; j < r; ++j) {
    for (int pass = 0; pass < 2; ++pass)
      for (std::uint32_t i = 0; i < j; ++i) {
        const float d =
            red.sum(m, [&](std::uint64_t k) { return fmul(a[k * r + j], a[k * r + i]); });
        red.sync();
        red.each(
            m, [&](std::uint64_t k) { a[k * r + j] = fsub(a[k * r + j], fmul(d, a[k * r + i])); });
        red.sync();
      }
    const float s = red.sum(m, [&](std::uint64_t k) { return fmul(a[k * r + j], a[k * r + j]); });
    red.sync();
    const float den = fadd(fsqrt(s), eps);
    red.each(m, [&](std::uint64_t k) { a[k * r + j] = fdiv(a[k * r + j], den); });
    red.sync();
  }
}

//! P[i][c] of M Q: the canonical sum over j of M[i][j] * Q[j][c] (m(i, j) reads M).
template <class M, class Reducer = sequential_reducer>
GRADCODEC_HD float powersgd_p_entry(M m, const float* q, std::uint64_t i, std::uint64_t cols,
                                    std::uint32_t r, std::uint32_t c, Reducer red = {}) {
  return red.sum(cols, [&](std::uint64_t j) { return fmul(m(i, j), q[j * r + c]); });
}

//! Q[j][c] of M^T P: the canonical sum over i of M[i][j] * P[i][c].
template <class M, class Reducer = sequential_reducer>
GRADCODEC_HD float powersgd_q_entry(M m, const float* p, std::uint64_t j, std::uint64_t rows,
                                    std::uint32_t r, std::uint32_t c, Reducer red = {}) {
  return red.sum(rows, [&](std::uint64_t i) { return fmul(m(i, j), p[i * r + c]); });
}

//! out[i][j] of P Q^T: the canonical sum over c of P[i][c] * Q[j][c].
GRADCODEC_HD float powersgd_out_entry(const float* p, const float* q, std::uint64_t i,
                                      std::uint64_t j, std::uint32_t r) {
  return canonical_sum(r, [&](std::uint64_t c) { return fmul(p[i * r + c], q[j * r + c]); });
}

}  // namespace gradcodec::blocks
