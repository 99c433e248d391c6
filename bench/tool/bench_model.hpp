// SPDX-License-Identifier: Apache-2.0
//! @file
//! The bytes model of `gradcodec bench`: the minimum bytes an operation must read and
//! write per element, which turns a time into effective GB/s. This is the one place the
//! model lives; docs/performance.md has the same table.
#pragma once

#include <cstdint>
#include <string_view>

#include "gradcodec/blocks/codec_traits.hpp"
#include "gradcodec/spec.hpp"

namespace gradcodec::tool {

enum class bench_op : std::uint8_t { encode, decode, decode_accumulate, encode_ef };

inline std::string_view bench_op_name(bench_op op) noexcept {
  switch (op) {
    case bench_op::encode: return "encode";
    case bench_op::decode: return "decode";
    case bench_op::decode_accumulate: return "decode_accumulate";
    case bench_op::encode_ef: return "encode_ef";
  }
  return "?";
}

//! Minimum bytes per element for f32 gradients of n elements whose frame (header
//! included) is `frame` bytes; `kept` is the number of elements a sparse frame carries.
//!   default:     encode  4 + F      decode F + 4   decode_accumulate F + 8        encode_ef 12 + F
//!   sparse:      (topk, dgc, randomk, threshold) decode_accumulate F + 8 kept/n (only the kept
//!                elements of acc are read and written)
//!   powersgd:    encode 8 + F (M is read twice: P = M Q, then Q = M^T P after the
//!                orthogonalization), encode_ef 24 + F (p = g + e written back: 12, Q = M^T P
//!                reads it: 4, e = M - P Q^T reads and writes it: 8)
//! where F = frame / n.
inline double bytes_per_element(codec_id id, bench_op op, std::uint64_t n, std::uint64_t frame,
                                std::uint64_t kept) noexcept {
  if (n == 0) return 0.0;
  const double f = static_cast<double>(frame) / static_cast<double>(n);
  const bool sparse = blocks::traits_of(id).selects;
  const bool lowrank = blocks::traits_of(id).matrix;
  switch (op) {
    case bench_op::encode: return (lowrank ? 8.0 : 4.0) + f;
    case bench_op::decode: return f + 4.0;
    case bench_op::decode_accumulate:
      return f + (sparse ? 8.0 * static_cast<double>(kept) / static_cast<double>(n) : 8.0);
    case bench_op::encode_ef: return (lowrank ? 24.0 : 12.0) + f;
  }
  return 0.0;
}

}  // namespace gradcodec::tool
