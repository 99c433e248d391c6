// SPDX-License-Identifier: Apache-2.0
//! @file
//! The canonical sum of docs/codecs.md ("Canonical sum") as one thread computes it: chunks
//! of 256 terms summed in 16 strided lanes folded 8, 4, 2, 1, and the chunk sums combined
//! pairwise. A term is any callable t(j) -> float for j in [0, len). Kernels that split a
//! group over threads reproduce the same order (see blocks/warp.cuh); this is the order
//! they must match.
#pragma once

#include <cstdint>

#include "gradcodec/blocks/config.hpp"
#include "gradcodec/blocks/fmath.hpp"
#include "gradcodec/blocks/pairwise.hpp"

namespace gradcodec::blocks {

inline constexpr std::uint32_t sum_chunk = 256;  //!< terms per chunk
inline constexpr std::uint32_t sum_lanes = 16;   //!< strided lanes per chunk

//! The sum of terms [begin, begin + 256) clipped to len.
template <class Term>
GRADCODEC_HD float chunk_sum(std::uint64_t begin, std::uint64_t len, Term& term) {
  float lane[sum_lanes];
  for (std::uint32_t j = 0; j < sum_lanes; ++j) lane[j] = 0.0f;
  for (std::uint32_t t = 0; t < sum_chunk && begin + t < len; ++t)
    lane[t % sum_lanes] = fadd(lane[t % sum_lanes], term(begin + t));
  for (std::uint32_t h = sum_lanes / 2; h >= 1; h /= 2)
    for (std::uint32_t j = 0; j < h; ++j) lane[j] = fadd(lane[j], lane[j + h]);
  return lane[0];
}

//! The canonical sum of term(0 .. len-1); +0.0 when len is 0.
template <class Term>
GRADCODEC_HD float canonical_sum(std::uint64_t len, Term term) {
  pairwise_sum sum;
  for (std::uint64_t c = 0; c < len; c += sum_chunk) sum.push(chunk_sum(c, len, term));
  return sum.total();
}

//! The reductions of one group as computed by one thread: the canonical sum and a count.
//! The scale functions of blocks/quant.hpp and blocks/sign.hpp take a reducer, so a
//! kernel can pass one that splits the group over a warp in the same order (blocks/warp.cuh).
struct sequential_reducer {
  template <class Term>
  GRADCODEC_HD float sum(std::uint64_t len, Term term) const {
    return canonical_sum(len, term);
  }
  template <class Pred>
  GRADCODEC_HD std::uint64_t count(std::uint64_t len, Pred pred) const {
    std::uint64_t c = 0;
    for (std::uint64_t j = 0; j < len; ++j) c += pred(j) ? 1u : 0u;
    return c;
  }
  //! f(j) for every j in [0, len) (a warp splits these over its lanes).
  template <class F>
  GRADCODEC_HD void each(std::uint64_t len, F f) const {
    for (std::uint64_t j = 0; j < len; ++j) f(j);
  }
  //! Makes the writes of `each` visible to every participant (nothing to do in one thread).
  GRADCODEC_HD void sync() const {}
};

}  // namespace gradcodec::blocks
