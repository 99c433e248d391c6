// SPDX-License-Identifier: Apache-2.0
//! @file
//! The selection order of the sparse codecs (docs/codecs.md "Sparsification"): an element's
//! key is its magnitude's bits, NaN above +Inf, and a larger key wins; equal keys go to the
//! lower index. Unsigned keys compare like magnitudes, so a radix select over key bits
//! finds the k-th largest key without sorting.
#pragma once

#include <cstdint>

#include "gradcodec/blocks/config.hpp"
#include "gradcodec/blocks/float16.hpp"

namespace gradcodec::blocks {

inline constexpr std::uint32_t sparse_nan_key = 0x7F800001u;  //!< every NaN, above +Inf

GRADCODEC_HD std::uint32_t sparse_key(float v) {
  const std::uint32_t a = float_bits(v) & 0x7FFFFFFFu;
  return a < sparse_nan_key ? a : sparse_nan_key;
}

//! Whether element (key a, index i) comes before (key b, index j) in the selection order.
GRADCODEC_HD bool sparse_before(std::uint32_t a, std::uint64_t i, std::uint32_t b,
                                std::uint64_t j) {
  return a != b ? a > b : i < j;
}

}  // namespace gradcodec::blocks
