// SPDX-License-Identifier: Apache-2.0
//! @file
//! The bench's model-shaped tensor layout.
#include "model_layout.hpp"

#include <algorithm>
#include <cmath>

namespace gradcodec::tool {

std::vector<comm::tensor_slot> model_layout(std::uint64_t n) {
  std::vector<comm::tensor_slot> slots;
  std::uint64_t d = 0;
  for (std::uint64_t c = 16; c <= 1024; c *= 2)
    if (16 * c * c <= n) d = c;
  if (d == 0) {
    auto r = static_cast<std::uint64_t>(std::sqrt(static_cast<double>(n)));
    while (r > 1 && n % r != 0) --r;
    slots.push_back({0, n, std::max<std::uint64_t>(r, 1)});
    return slots;
  }
  const std::uint64_t block = 12 * d * d;
  const std::uint64_t layers = std::max<std::uint64_t>(1, (3 * n / 4) / block);
  const std::uint64_t embedding_rows = (n - layers * block) / d;
  std::uint64_t at = 0;
  const auto add = [&](std::uint64_t rows, std::uint64_t cols) {
    slots.push_back({at, rows * cols, rows});
    at += rows * cols;
  };
  if (embedding_rows > 0) add(embedding_rows, d);
  for (std::uint64_t l = 0; l < layers; ++l) {
    add(3 * d, d);
    add(d, d);
    add(4 * d, d);
    add(d, 4 * d);
  }
  if (at < n) slots.push_back({at, n - at, 0});
  return slots;
}

}  // namespace gradcodec::tool
