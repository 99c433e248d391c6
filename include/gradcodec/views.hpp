// SPDX-License-Identifier: Apache-2.0
//! @file
//! Non-owning views over caller memory: gradients (f32/f16/bf16) and bytes.
//! The library never takes ownership and never allocates behind a view.
#pragma once

#include <cstddef>
#include <cstdint>
#include <iterator>
#include <span>
#include <type_traits>

#include "gradcodec/dtype.hpp"

namespace gradcodec {

//! A read-only gradient: n elements of `type` at `data`. `rows` gives a matrix shape
//! rows x (n / rows) to codecs that need one (PowerSGD); 0 means a flat vector.
struct const_tensor_view {
  const void* data = nullptr;
  std::uint64_t n = 0;
  dtype type = dtype::f32;
  std::uint64_t rows = 0;
};

//! A writable gradient (decode output, accumulator, residual).
struct tensor_view {
  void* data = nullptr;
  std::uint64_t n = 0;
  dtype type = dtype::f32;
  std::uint64_t rows = 0;

  operator const_tensor_view() const noexcept { return {data, n, type, rows}; }  // NOLINT
};

//! A view over a contiguous range of float (std::vector, std::span, std::array, ...):
//! writable when the range is, read-only otherwise.
template <class Range>
auto view(Range&& r, std::uint64_t rows = 0) noexcept {
  auto* p = std::data(r);
  static_assert(std::is_same_v<std::remove_cv_t<std::remove_pointer_t<decltype(p)>>, float>,
                "view() takes float ranges; build a tensor_view by hand for f16/bf16");
  if constexpr (std::is_const_v<std::remove_pointer_t<decltype(p)>>) {
    return const_tensor_view{p, std::size(r), dtype::f32, rows};
  } else {
    return tensor_view{p, std::size(r), dtype::f32, rows};
  }
}

using const_bytes = std::span<const std::byte>;
using mutable_bytes = std::span<std::byte>;

}  // namespace gradcodec
