// SPDX-License-Identifier: Apache-2.0
//! @file
//! Stratified random-k (docs/codecs.md "randomk") as __host__ __device__ pieces: stratum j
//! of k over n elements, the index the shared generator picks in it, and the 16 generator
//! bytes the payload carries. Stratum j needs only j, so any thread can take any stratum.
#pragma once

#include <cstdint>

#include "gradcodec/blocks/config.hpp"
#include "gradcodec/blocks/philox.hpp"

namespace gradcodec::blocks {

//! floor(j * n / k), exact: j * n reaches 2^96.
GRADCODEC_HD std::uint64_t randomk_stratum_lo(std::uint64_t j, std::uint64_t n, std::uint64_t k) {
  __extension__ typedef unsigned __int128 u128;
  return static_cast<std::uint64_t>(static_cast<u128>(j) * n / k);
}

struct randomk_stratum {
  std::uint64_t lo, size, index;  //!< elements [lo, lo + size); the one sent is index
};

//! Stratum j of k (1 <= k <= n).
GRADCODEC_HD randomk_stratum randomk_stratum_of(const counter_rng& rng, std::uint64_t j,
                                                std::uint64_t n, std::uint64_t k) {
  randomk_stratum s{};
  s.lo = randomk_stratum_lo(j, n, k);
  s.size = randomk_stratum_lo(j + 1, n, k) - s.lo;
  s.index = s.lo + scale_u32(rng.at(rng_stream::selection, j), s.size);
  return s;
}

}  // namespace gradcodec::blocks
