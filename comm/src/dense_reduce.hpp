// SPDX-License-Identifier: Apache-2.0
//! @file
//! The deterministic dense reduction (docs/comm.md): the same bits on every rank.
#pragma once

#include <cstdint>
#include <vector>

#include "comm/src/run.hpp"

namespace gradcodec::comm::detail {

//! What the dense reduction keeps between calls: the packed blocks it sends and receives,
//! their sizes, and the lengths read back from the received blocks.
struct dense_reduce_buffers {
  buffer send, recv;
  std::vector<std::uint64_t> sizes_out, sizes_in, lengths;
};

//! Reduces n f32 values over r.comm in place: a reduce-scatter (alltoallv) into W chunks,
//! the owner accumulating acc = fma(alpha_i, v_s, acc) from +0.0 over sources s = 0..W-1
//! in order (alpha_i = alpha_lo for i < split, else alpha_hi), then an allgatherv of the
//! chunks. Bit-identical on every rank whatever the transport.
status dense_reduce(run& r, float* values, std::uint64_t n, std::uint64_t split, float alpha_lo,
                    float alpha_hi);

//! The same reduction of `src` (any dtype, converted to f32) over r.comm, leaving the f32
//! result in dst on rank `root` only (a reduce-scatter, then every chunk to the root).
status dense_reduce_to_root(run& r, const_tensor_view src, float* dst, float alpha, int root);

}  // namespace gradcodec::comm::detail
