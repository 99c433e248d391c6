// SPDX-License-Identifier: Apache-2.0
//! @file
//! What a block-scaled encode writes into the header's group and mode, from its spec and
//! the input's shape: the same for the front end's size bound and every backend.
#pragma once

#include <cstdint>

#include "gradcodec/blocks/block_scaled.hpp"
#include "gradcodec/spec.hpp"

namespace gradcodec::detail {

//! Elements per scale: the spec's block, or for fp8row a row of the input's matrix view.
inline std::uint64_t block_scaled_group(const codec_spec& s, std::uint64_t n, std::uint64_t rows) {
  if (s.id == codec_id::fp8row && rows > 0 && n > 0) return n / rows;
  return s.bucket;
}

inline std::uint8_t block_scaled_mode(const codec_spec& s) {
  return static_cast<std::uint8_t>((s.rounding == rounding_mode::stochastic ? mode_stochastic : 0) |
                                   (s.rotate ? mode_rotate : 0));
}

inline blocks::block_rule block_rule_of(const codec_spec& s) {
  return blocks::block_rule_of(s.id, s.fmt, block_scaled_mode(s));
}

//! The largest row fp8row takes (the header's group field).
inline constexpr std::uint64_t max_block_scaled_group = std::uint64_t{1} << 24;

}  // namespace gradcodec::detail
