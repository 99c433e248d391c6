// SPDX-License-Identifier: Apache-2.0
//! @file
//! What the sparsifiers' descriptors share: the kept count's parameters, checks and
//! printing, and the payload of an indexed selection.
#pragma once

#include <cstdint>

#include "gradcodec/blocks/layout.hpp"
#include "src/codecs/descriptor.hpp"

namespace gradcodec::detail {

inline constexpr param_info param_k{"k", "0", ">= 0", "absolute count; overrides ratio when > 0"};
inline constexpr header_meaning selection_fields{"items sent", "", "", ""};

inline status check_ratio(const codec_spec& s) {
  if (!(s.ratio > 0.0 && s.ratio <= 1.0)) return out_of_range(s, "ratio", "(0, 1]");
  return {};
}

//! k when given, else the ratio.
inline void print_count(const codec_spec& s, spec_printer& out) {
  if (s.k > 0)
    out.add("k", s.k);
  else
    out.add_double("ratio", s.ratio);
}

//! Values and indices of `count` kept elements.
inline std::uint64_t indexed_payload(std::uint64_t count, std::uint64_t n, dtype type) {
  return blocks::sparse_layout_of(count, dtype_size(type), n > 0xFFFFFFFFu).total;
}

inline result<std::uint64_t> indexed_payload(const frame_header& h) {
  if (h.count > h.n) return corrupt_frame("count above n");
  return blocks::sparse_layout_of(h.count, dtype_size(h.type), (h.flags & flag_index64) != 0).total;
}

}  // namespace gradcodec::detail
