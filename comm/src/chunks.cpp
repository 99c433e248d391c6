// SPDX-License-Identifier: Apache-2.0
//! @file
//! Chunks in whole codec units.
#include "comm/src/chunks.hpp"

#include "gradcodec/blocks/codec_traits.hpp"
#include "gradcodec/powersgd.hpp"

namespace gradcodec::comm::detail {

range chunk_of(std::uint64_t len, std::uint64_t unit, int world, int c) noexcept {
  const std::uint64_t units = (len + unit - 1) / unit;
  const auto w = static_cast<std::uint64_t>(world);
  const auto cc = static_cast<std::uint64_t>(c);
  const std::uint64_t base = units / w, rem = units % w;
  const std::uint64_t first = cc * base + std::min(cc, rem);
  const std::uint64_t count = base + (cc < rem ? 1 : 0);
  const std::uint64_t begin = std::min(len, first * unit);
  const std::uint64_t end = std::min(len, (first + count) * unit);
  return {begin, end - begin};
}

std::uint64_t unit_of(const codec_spec& spec) noexcept {
  return blocks::traits_of(spec.id).bucketed ? spec.bucket : 1;
}

powersgd_factors powersgd_factors_of(const codec_spec& spec, std::uint64_t rows,
                                     std::uint64_t n) noexcept {
  powersgd_factors f;
  if (rows == 0 || n == 0) return f;
  f.rows = rows;
  f.cols = n / rows;
  f.compressed = powersgd_compresses(spec, f.rows, f.cols);
  f.rank = f.compressed ? powersgd_rank(spec, f.rows, f.cols) : 0;
  return f;
}

void powersgd_pieces(std::uint64_t n, std::uint64_t whole_rows,
                     std::span<const tensor_slot> tensors, std::vector<tensor_slot>& out) {
  out.clear();
  const auto add = [&](std::uint64_t offset, std::uint64_t len, std::uint64_t rows) {
    if (len > 0) out.push_back({offset, len, rows});
  };
  if (tensors.empty()) {
    add(0, n, whole_rows);
    return;
  }
  std::uint64_t at = 0;
  for (const tensor_slot& s : tensors) {
    add(at, s.offset - at, 0);
    add(s.offset, s.n, s.rows);
    at = s.offset + s.n;
  }
  add(at, n - at, 0);
}

}  // namespace gradcodec::comm::detail
