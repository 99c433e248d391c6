// SPDX-License-Identifier: Apache-2.0
//! @file
//! The tool's host array.
#include "array.hpp"

#include "error.hpp"
#include "gradcodec/blocks/float16.hpp"

namespace gradcodec::tool {

array array::zeros(dtype t, std::vector<std::uint64_t> dims) {
  std::uint64_t n = 0;
  if (!element_count(dims, std::uint64_t{1} << 48, n))
    fail("shape " + shape_string(dims) + " has more than 2^48 elements");
  array a;
  a.type = t;
  a.shape = std::move(dims);
  if (t == dtype::f32)
    a.f32.assign(n, 0.0f);
  else
    a.half.assign(n, 0);
  return a;
}

const void* array::data() const noexcept {
  return type == dtype::f32 ? static_cast<const void*>(f32.data()) : half.data();
}

void* array::data() noexcept {
  return type == dtype::f32 ? static_cast<void*>(f32.data()) : half.data();
}

float array::at(std::uint64_t i) const noexcept {
  switch (type) {
    case dtype::f32: return f32[i];
    case dtype::f16: return blocks::f16_to_f32(half[i]);
    case dtype::bf16: return blocks::bf16_to_f32(half[i]);
  }
  return 0.0f;
}

std::uint64_t array::rows() const noexcept { return size() > 0 ? rows_of(shape) : 0; }

const_tensor_view array::view() const noexcept { return {data(), size(), type, rows()}; }

tensor_view array::mutable_view() noexcept { return {data(), size(), type, rows()}; }

bool element_count(std::span<const std::uint64_t> shape, std::uint64_t limit, std::uint64_t& n) {
  // A zero dim makes the product 0 whatever the others are, so check it first.
  for (const auto d : shape)
    if (d == 0) {
      n = 0;
      return true;
    }
  std::uint64_t p = 1;
  for (const auto d : shape) {
    if (p > limit / d) return false;
    p *= d;
  }
  if (p > limit) return false;
  n = p;
  return true;
}

std::string shape_string(std::span<const std::uint64_t> shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

std::uint64_t rows_of(std::span<const std::uint64_t> shape) noexcept {
  if (shape.size() < 2) return 0;
  for (const auto d : shape)
    if (d == 0) return 0;
  return shape[0];
}

}  // namespace gradcodec::tool
