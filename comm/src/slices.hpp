// SPDX-License-Identifier: Apache-2.0
//! @file
//! Element access and sub-views of tensor views, in any dtype.
#pragma once

#include <cstdint>

#include "comm/src/element_ops.hpp"
#include "gradcodec/blocks/bytes.hpp"
#include "gradcodec/views.hpp"

namespace gradcodec::comm::detail {

inline float load(const_tensor_view v, std::uint64_t i) { return load_value(v.data, v.type, i); }
inline void store(tensor_view v, std::uint64_t i, float x) { store_value(v.data, v.type, i, x); }

inline const_tensor_view slice(const_tensor_view v, std::uint64_t begin, std::uint64_t n,
                               std::uint64_t rows = 0) {
  return {static_cast<const std::byte*>(v.data) + begin * dtype_size(v.type), n, v.type, rows};
}
inline tensor_view slice(tensor_view v, std::uint64_t begin, std::uint64_t n,
                         std::uint64_t rows = 0) {
  return {static_cast<std::byte*>(v.data) + begin * dtype_size(v.type), n, v.type, rows};
}
inline tensor_view f32_view(float* p, std::uint64_t n, std::uint64_t rows = 0) {
  return {p, n, dtype::f32, rows};
}

using blocks::get;
using blocks::put;

}  // namespace gradcodec::comm::detail
