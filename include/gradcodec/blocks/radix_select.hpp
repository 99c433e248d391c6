// SPDX-License-Identifier: Apache-2.0
//! @file
//! Exact top-m by sparse key (blocks/sparse.hpp) without sorting: three histogram passes
//! over the key bits (11, 11 and 9 bits, most significant first) narrow down the m-th
//! largest key T; the selection is then every key above T plus the `need_equal`
//! lowest-index elements whose key is T, in index order. The histograms can be built by
//! any number of threads (counts do not depend on order); radix_descend runs once per pass.
#pragma once

#include <cstdint>

#include "gradcodec/blocks/config.hpp"
#include "gradcodec/blocks/fmath.hpp"
#include "gradcodec/blocks/sparse.hpp"

namespace gradcodec::blocks {

inline constexpr int radix_pass_count = 3;
inline constexpr std::uint32_t radix_max_bins = 2048;

GRADCODEC_HD std::uint32_t radix_shift(int pass) { return pass == 0 ? 20u : (pass == 1 ? 9u : 0u); }
GRADCODEC_HD std::uint32_t radix_bins(int pass) { return pass == 2 ? 512u : 2048u; }

//! What the passes so far have fixed: the high key bits (prefix under mask) of T, and how
//! many elements with that prefix still belong to the selection.
struct radix_state {
  std::uint32_t prefix = 0, mask = 0;
  std::uint64_t remaining = 0;  //!< before the passes: m (1 <= m <= candidates)

  //! Whether a key is still in the running (counted by the next pass's histogram).
  GRADCODEC_HD bool matches(std::uint32_t key) const { return (key & mask) == prefix; }
  //! The key's bin in `pass`.
  GRADCODEC_HD static std::uint32_t bin(std::uint32_t key, int pass) {
    return (key >> radix_shift(pass)) & (radix_bins(pass) - 1u);
  }
  //! Given the histogram of the matching keys in `pass`, fixes that pass's bits of T: the
  //! highest bin where the count from the top reaches `remaining`. Counts of any unsigned
  //! type: 32 bits hold a bin of fewer than 2^32 keys, a device-wide histogram needs 64.
  template <class Count>
  GRADCODEC_HD void descend(const Count* hist, int pass) {
    std::uint64_t above = 0;
    for (std::uint32_t b = radix_bins(pass); b-- > 0;) {
      if (above + hist[b] >= remaining) {
        prefix |= b << radix_shift(pass);
        mask |= (radix_bins(pass) - 1u) << radix_shift(pass);
        remaining -= above;
        return;
      }
      above += hist[b];
    }
  }
  //! After the last pass: T, and how many elements with key T are selected.
  GRADCODEC_HD std::uint32_t threshold() const { return prefix; }
  GRADCODEC_HD std::uint64_t need_equal() const { return remaining; }
};

//! Which elements a sparse selection ranks and how (topk: tau = 0, every element; threshold
//! and dgc: the candidates of a threshold), with the radix state of the selection. In
//! binary mode (dgc's fallback) every element takes part with key 1 for a candidate and 0
//! otherwise, so "key above T = 0, plus need_equal more in index order" sends every
//! candidate and the lowest-index others.
struct select_rule {
  radix_state state;
  float tau = 0.0f;  //!< candidates: non-finite or |v| >= tau
  std::uint32_t binary = 0;
  std::uint32_t skip = 0;  //!< 1: the radix passes leave the state alone (already final)

  GRADCODEC_HD bool candidate(float v) const { return !is_finite(v) || fabs_bits(v) >= tau; }
  //! Whether v takes part, and its key.
  GRADCODEC_HD bool key_of(float v, std::uint32_t& key) const {
    const bool cand = candidate(v);
    if (binary != 0) {
      key = cand ? 1u : 0u;
      return true;
    }
    key = sparse_key(v);
    return cand;
  }
};

}  // namespace gradcodec::blocks
