// SPDX-License-Identifier: Apache-2.0
//! @file
//! The deterministic dense reduction: reduce-scatter with alltoallv, an owner that adds the
//! sources in rank order, then allgatherv (or a gather to one root). Floating-point sums of
//! the transport (MPI_SUM, ncclSum) are never used: their order depends on the algorithm.
#include <cmath>

#include "internal.hpp"

namespace gradcodec::comm::detail {

namespace {

//! Sends `src` chunk d (with a header) to rank d and sums what arrives for this rank's
//! chunk into acc (f32, chunk length). Returns the transport status.
status scatter_and_sum(run& r, const_tensor_view src, float* acc, range mine, std::uint64_t split,
                       float alpha_lo, float alpha_hi) {
  const int w = r.comm.size();
  const std::uint64_t vsize = dtype_size(src.type);
  auto& sizes_out = r.ws.sizes_a;
  auto& sizes_in = r.ws.sizes_b;
  sizes_out.assign(static_cast<std::size_t>(w), 0);
  sizes_in.assign(static_cast<std::size_t>(w), 0);
  std::uint64_t total_out = 0;
  for (int d = 0; d < w; ++d) {
    sizes_out[static_cast<std::size_t>(d)] = block_header + chunk_of(src.n, 1, w, d).len * vsize;
    total_out += sizes_out[static_cast<std::size_t>(d)];
  }
  for (int s = 0; s < w; ++s)
    sizes_in[static_cast<std::size_t>(s)] = block_header + mine.len * vsize;
  const std::uint64_t total_in = static_cast<std::uint64_t>(w) * (block_header + mine.len * vsize);
  std::byte* out = r.ws.dense_send.reserve(total_out);
  std::byte* in = r.ws.dense_recv.reserve(total_in);
  {
    std::byte* at = out;
    for (int d = 0; d < w; ++d) {
      const range c = chunk_of(src.n, 1, w, d);
      put_block(at, r.poison, c.len * vsize);
      if (c.len > 0)
        std::memcpy(at + block_header, static_cast<const std::byte*>(src.data) + c.begin * vsize,
                    c.len * vsize);
      at += block_header + c.len * vsize;
    }
  }
  {
    timer t(r.times, &phase_times::comm_s);
    count_traffic(r, total_out, total_in);
    if (auto st = r.comm.alltoallv(out, sizes_out, in, sizes_in); !st.ok()) return st;
  }
  timer t(r.times, &phase_times::reduce_s);
  for (int s = 0; s < w; ++s)
    (void)read_block(r, in + static_cast<std::uint64_t>(s) * (block_header + mine.len * vsize),
                     mine.len * vsize);
  if (r.failed()) return {};
  for (std::uint64_t j = 0; j < mine.len; ++j) acc[j] = 0.0f;
  for (int s = 0; s < w; ++s) {
    const const_tensor_view v{
        in + static_cast<std::uint64_t>(s) * (block_header + mine.len * vsize) + block_header,
        mine.len, src.type, 0};
    for (std::uint64_t j = 0; j < mine.len; ++j) {
      const float a = mine.begin + j < split ? alpha_lo : alpha_hi;
      acc[j] = std::fma(a, load(v, j), acc[j]);
    }
  }
  return {};
}

}  // namespace

status dense_reduce(run& r, float* values, std::uint64_t n, std::uint64_t split, float alpha_lo,
                    float alpha_hi) {
  const int w = r.comm.size();
  const range mine = chunk_of(n, 1, w, r.comm.rank());
  float* acc = r.ws.accum.as<float>(mine.len + 1);
  if (auto st =
          scatter_and_sum(r, {values, n, dtype::f32, 0}, acc, mine, split, alpha_lo, alpha_hi);
      !st.ok())
    return st;
  // Allgather the reduced chunks, each behind a header carrying this rank's error word.
  auto& sizes = r.ws.sizes_a;
  sizes.assign(static_cast<std::size_t>(w), 0);
  std::uint64_t total = 0;
  for (int s = 0; s < w; ++s) {
    sizes[static_cast<std::size_t>(s)] = block_header + chunk_of(n, 1, w, s).len * 4;
    total += sizes[static_cast<std::size_t>(s)];
  }
  std::byte* out = r.ws.dense_send.reserve(block_header + mine.len * 4);
  std::byte* in = r.ws.dense_recv.reserve(total);
  put_block(out, r.poison, mine.len * 4);
  if (mine.len > 0) std::memcpy(out + block_header, acc, mine.len * 4);
  {
    timer t(r.times, &phase_times::comm_s);
    count_traffic(r, block_header + mine.len * 4, total);
    if (auto st = r.comm.allgatherv(out, block_header + mine.len * 4, in, sizes); !st.ok())
      return st;
  }
  std::byte* at = in;
  for (int s = 0; s < w; ++s) {
    const range c = chunk_of(n, 1, w, s);
    (void)read_block(r, at, c.len * 4);
    if (!r.failed() && c.len > 0) std::memcpy(values + c.begin, at + block_header, c.len * 4);
    at += block_header + c.len * 4;
  }
  return {};
}

status dense_reduce_to_root(run& r, const_tensor_view src, float* dst, float alpha, int root) {
  const int w = r.comm.size();
  const range mine = chunk_of(src.n, 1, w, r.comm.rank());
  float* acc = r.ws.accum.as<float>(mine.len + 1);
  if (auto st = scatter_and_sum(r, src, acc, mine, src.n, alpha, alpha); !st.ok()) return st;
  // Every reduced chunk goes to the root.
  auto& sizes_out = r.ws.sizes_a;
  auto& sizes_in = r.ws.sizes_b;
  sizes_out.assign(static_cast<std::size_t>(w), 0);
  sizes_in.assign(static_cast<std::size_t>(w), 0);
  sizes_out[static_cast<std::size_t>(root)] = block_header + mine.len * 4;
  std::uint64_t total_in = 0;
  if (r.comm.rank() == root)
    for (int s = 0; s < w; ++s) {
      sizes_in[static_cast<std::size_t>(s)] = block_header + chunk_of(src.n, 1, w, s).len * 4;
      total_in += sizes_in[static_cast<std::size_t>(s)];
    }
  std::byte* out = r.ws.dense_send.reserve(block_header + mine.len * 4);
  std::byte* in = r.ws.dense_recv.reserve(total_in + 1);
  put_block(out, r.poison, mine.len * 4);
  if (mine.len > 0) std::memcpy(out + block_header, acc, mine.len * 4);
  {
    timer t(r.times, &phase_times::comm_s);
    count_traffic(r, block_header + mine.len * 4, total_in);
    if (auto st = r.comm.alltoallv(out, sizes_out, in, sizes_in); !st.ok()) return st;
  }
  if (r.comm.rank() != root) return {};
  std::byte* at = in;
  for (int s = 0; s < w; ++s) {
    const range c = chunk_of(src.n, 1, w, s);
    (void)read_block(r, at, c.len * 4);
    if (!r.failed() && c.len > 0) std::memcpy(dst + c.begin, at + block_header, c.len * 4);
    at += block_header + c.len * 4;
  }
  return {};
}

}  // namespace gradcodec::comm::detail
