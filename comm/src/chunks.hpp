// SPDX-License-Identifier: Apache-2.0
//! @file
//! How a call cuts its buffer: segments, and chunks of W in whole codec units.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "gradcodec/comm/bucket.hpp"
#include "gradcodec/spec.hpp"

namespace gradcodec::comm::detail {

struct range {
  std::uint64_t begin = 0, len = 0;
};

//! Chunk c of W over `len` elements in whole units: U = ceil(len/unit) units, chunk c gets
//! U/W units plus one if c < U mod W, in order; the last non-empty chunk ends at len.
range chunk_of(std::uint64_t len, std::uint64_t unit, int world, int c) noexcept;

//! Elements per codec bucket for bucketed codecs, else 1: chunk and segment boundaries
//! fall on multiples of it.
std::uint64_t unit_of(const codec_spec& spec) noexcept;

//! One segment of the flat buffer: elements [offset, offset + len), a rows x cols matrix
//! when rows > 0 (PowerSGD).
struct segment {
  std::uint64_t offset = 0, len = 0, rows = 0;
};

//! PowerSGD's segments of n elements: one per tensor slot and one per gap between slots
//! (a vector, rows = 0), in buffer order; without slots, the whole buffer as a
//! whole_rows x (n / whole_rows) matrix. Empty pieces are left out.
void powersgd_pieces(std::uint64_t n, std::uint64_t whole_rows,
                     std::span<const tensor_slot> tensors, std::vector<tensor_slot>& out);

//! How PowerSGD sends a piece of n elements with `rows` rows: factorised (P rows x rank,
//! Q cols x rank) when compressed, else as its values.
struct powersgd_factors {
  bool compressed = false;
  std::uint64_t rows = 0, cols = 0;
  std::uint32_t rank = 0;
};
powersgd_factors powersgd_factors_of(const codec_spec& spec, std::uint64_t rows,
                                     std::uint64_t n) noexcept;

}  // namespace gradcodec::comm::detail
