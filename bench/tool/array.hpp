// SPDX-License-Identifier: Apache-2.0
//! @file
//! A host array as the tool sees it: a dtype, a C-order shape, and the elements.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "gradcodec/dtype.hpp"
#include "gradcodec/views.hpp"

namespace gradcodec::tool {

struct array {
  dtype type = dtype::f32;
  std::vector<std::uint64_t> shape;  //!< empty: a 0-d array (one element)
  std::vector<float> f32;            //!< the elements when type == f32
  std::vector<std::uint16_t> half;   //!< the element bits when type is f16 or bf16

  //! Allocates zeroed storage for a shape (the product must fit, see element_count).
  static array zeros(dtype type, std::vector<std::uint64_t> shape);

  [[nodiscard]] std::uint64_t size() const noexcept {
    return type == dtype::f32 ? f32.size() : half.size();
  }
  [[nodiscard]] const void* data() const noexcept;
  [[nodiscard]] void* data() noexcept;
  //! Element i widened to f32.
  [[nodiscard]] float at(std::uint64_t i) const noexcept;
  //! The library's matrix view: rows = shape[0] for ndim >= 2 (PyTorch's PowerSGD hook
  //! convention), else 0 (a flat vector).
  [[nodiscard]] std::uint64_t rows() const noexcept;
  [[nodiscard]] const_tensor_view view() const noexcept;
  [[nodiscard]] tensor_view mutable_view() noexcept;
};

//! The product of the dims, or nothing (returns false) when it exceeds `limit`.
bool element_count(std::span<const std::uint64_t> shape, std::uint64_t limit, std::uint64_t& n);

//! "[3, 4]" ("[]" for 0-d).
std::string shape_string(std::span<const std::uint64_t> shape);

//! The rows an array of this shape gets (shape[0] for ndim >= 2 and n > 0, else 0).
std::uint64_t rows_of(std::span<const std::uint64_t> shape) noexcept;

}  // namespace gradcodec::tool
