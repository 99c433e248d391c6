// SPDX-License-Identifier: Apache-2.0
//! @file
//! Pieces shared by the index + value codecs (topk, dgc, threshold), docs/codecs.md
//! "Sparsification": the selection key, the top-by-key selection, the payload writer and
//! the decoder (all three share one payload layout).
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "common.hpp"

namespace gradcodec::reference::sparse {

//! key(v) as an unsigned integer: the bits of |v|, every NaN mapped to one value just above
//! +Inf. Integer order equals |v| order, -0.0 == +0.0, and NaN ranks above +Inf.
inline constexpr std::uint32_t nan_key = 0x7F800001u;
inline std::uint32_t key_of(float v) {
  return std::min(blocks::float_bits(v) & 0x7FFFFFFFu, nan_key);
}

//! "Top by key": larger key first, equal keys lower index first (a strict total order).
struct by_key {
  const_tensor_view in;
  bool operator()(std::uint64_t a, std::uint64_t b) const {
    const std::uint32_t ka = key_of(load(in, a)), kb = key_of(load(in, b));
    return ka != kb ? ka > kb : a < b;
  }
};

//! Moves the k best (by_key) of idx[0..m) to idx[0..k), sorted by ascending index.
//! O(m) on average (introselect), O(m log m) at worst, plus O(k log k).
inline void select_top(std::uint64_t* idx, std::uint64_t m, std::uint64_t k, const_tensor_view in) {
  if (k == 0) return;
  if (k < m) std::nth_element(idx, idx + (k - 1), idx + m, by_key{in});
  std::sort(idx, idx + k);
}

inline blocks::sparse_layout layout_of(const detail::encode_call& c, std::uint64_t k) {
  return blocks::sparse_layout_of(k, dtype_size(c.wire), (c.hdr.flags & flag_index64) != 0);
}

//! Writes a whole sparse payload of k entries (capacity already checked): index_at(j) is
//! the j-th sent index, ascending; its value is read from the input and stored in the
//! wire dtype. Sets payload_bytes and count.
template <class IndexAt>
void write_payload(const detail::encode_call& c, const blocks::sparse_layout& l, std::uint64_t k,
                   IndexAt index_at) {
  const std::uint64_t vsize = dtype_size(c.wire);
  const bool index64 = (c.hdr.flags & flag_index64) != 0;
  std::memset(c.payload, 0, l.total);
  for (std::uint64_t j = 0; j < k; ++j) {
    const std::uint64_t i = index_at(j);
    put_value(c.payload + l.values_offset + j * vsize, c.wire, load(c.in, i));
    if (index64)
      put<std::uint64_t>(c.payload + l.index_offset + j * 8, i);
    else
      put<std::uint32_t>(c.payload + l.index_offset + j * 4, static_cast<std::uint32_t>(i));
  }
  c.hdr.payload_bytes = l.total;
  c.hdr.count = k;
}

//! Decodes a sparse payload: indices are checked (strictly ascending, < n) before anything
//! is written. decode: +0.0 everywhere else; decode-accumulate: only the k positions.
inline status decode(const detail::decode_call& c) {
  const std::uint64_t n = c.hdr.n, k = c.hdr.count;
  const bool index64 = (c.hdr.flags & flag_index64) != 0;
  const blocks::sparse_layout l = blocks::sparse_layout_of(k, dtype_size(c.hdr.type), index64);
  auto index = [&](std::uint64_t j) -> std::uint64_t {
    return index64 ? get<std::uint64_t>(c.payload + l.index_offset + j * 8)
                   : get<std::uint32_t>(c.payload + l.index_offset + j * 4);
  };
  auto value = [&](std::uint64_t j) {
    return get_value(c.payload + l.values_offset + j * dtype_size(c.hdr.type), c.hdr.type);
  };
  for (std::uint64_t j = 0; j < k; ++j) {
    const std::uint64_t i = index(j);
    if (i >= n) return corrupt("sparse index out of range");
    if (j > 0 && i <= index(j - 1)) return corrupt("sparse indices not strictly ascending");
  }
  if (c.accumulate) {
    for (std::uint64_t j = 0; j < k; ++j) emit(c, index(j), value(j));
    return {};
  }
  std::uint64_t j = 0;
  for (std::uint64_t i = 0; i < n; ++i) {
    if (j < k && index(j) == i) {
      emit(c, i, value(j));
      ++j;
    } else {
      emit(c, i, 0.0f);
    }
  }
  return {};
}

}  // namespace gradcodec::reference::sparse
