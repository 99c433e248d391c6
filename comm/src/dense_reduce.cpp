// SPDX-License-Identifier: Apache-2.0
//! @file
//! The deterministic dense reduction: reduce-scatter with alltoallv, an owner that adds the
//! sources in rank order, then allgatherv (or a gather to one root). Floating-point sums of
//! the transport (MPI_SUM, ncclSum) are never used: their order depends on the algorithm.
#include <algorithm>

#include "comm/src/chunks.hpp"
#include "comm/src/collectives.hpp"
#include "comm/src/dense_reduce.hpp"
#include "comm/src/run.hpp"
#include "comm/src/wire_blocks.hpp"
#include "comm/src/workspace.hpp"

namespace gradcodec::comm::detail {

namespace {

//! Sends `src` chunk d (with a header) to rank d and sums what arrives for this rank's
//! chunk into acc (f32, chunk length). Returns the transport status.
status scatter_and_sum(run& r, const_tensor_view src, float* acc, range mine, std::uint64_t split,
                       float alpha_lo, float alpha_hi) {
  const int w = r.comm.size();
  const std::uint64_t vsize = dtype_size(src.type);
  auto& sizes_out = r.ws.dense.sizes_out;
  auto& sizes_in = r.ws.dense.sizes_in;
  sizes_out.assign(static_cast<std::size_t>(w), 0);
  sizes_in.assign(static_cast<std::size_t>(w), 0);
  std::uint64_t total_out = 0;
  for (int d = 0; d < w; ++d) {
    sizes_out[static_cast<std::size_t>(d)] = block_header + chunk_of(src.n, 1, w, d).len * vsize;
    total_out += sizes_out[static_cast<std::size_t>(d)];
  }
  const std::uint64_t block_in = block_header + mine.len * vsize;
  for (int s = 0; s < w; ++s) sizes_in[static_cast<std::size_t>(s)] = block_in;
  const std::uint64_t total_in = static_cast<std::uint64_t>(w) * block_in;
  std::byte* out = r.ws.dense.send.reserve(total_out, r.mem);
  std::byte* in = r.ws.dense.recv.reserve(total_in, r.mem);
  {
    std::byte* at = out;
    for (int d = 0; d < w; ++d) {
      const range c = chunk_of(src.n, 1, w, d);
      if (auto st = put_block(r, at, r.poison, c.len * vsize); !st.ok()) return st;
      if (c.len > 0)
        if (auto st = r.mem.copy(at + block_header,
                                 static_cast<const std::byte*>(src.data) + c.begin * vsize,
                                 c.len * vsize);
            !st.ok())
          return st;
      at += block_header + c.len * vsize;
    }
  }
  {
    timer t(r.times, &phase_times::comm_s);
    count_traffic(r, total_out, total_in);
    if (auto st = r.comm.alltoallv(out, sizes_out, in, sizes_in); !st.ok()) return st;
  }
  timer t(r.times, &phase_times::reduce_s);
  auto& offsets = r.ws.dense.sizes_out;  // sizes_out is spent
  offsets.resize(static_cast<std::size_t>(w));
  for (int s = 0; s < w; ++s)
    offsets[static_cast<std::size_t>(s)] = static_cast<std::uint64_t>(s) * block_in;
  const std::uint64_t caps[] = {mine.len * vsize};
  if (auto st = read_blocks(r, in, offsets, caps, sizes_in); !st.ok()) return st;
  if (r.failed()) return {};
  if (auto st = r.mem.zero(acc, mine.len * 4); !st.ok()) return st;
  // The weight changes at the global index `split`; this chunk starts at mine.begin.
  const std::uint64_t local_split =
      split <= mine.begin ? 0 : std::min(split - mine.begin, mine.len);
  for (int s = 0; s < w; ++s) {
    const const_tensor_view v{in + static_cast<std::uint64_t>(s) * block_in + block_header,
                              mine.len, src.type, 0};
    if (auto st = r.mem.accumulate(v, alpha_lo, alpha_hi, local_split, acc); !st.ok()) return st;
  }
  return {};
}

//! Sends this rank's reduced chunk `acc` (behind a header) to the ranks that want it (a
//! allgatherv to all, or an alltoallv to `root`), and copies the chunks that arrive into
//! dst at their places. Ranks that receive nothing leave dst alone.
status spread(run& r, const float* acc, range mine, std::uint64_t n, float* dst, int root) {
  const int w = r.comm.size();
  const bool to_all = root < 0;
  const bool receiving = to_all || r.comm.rank() == root;
  auto& sizes_in = r.ws.dense.sizes_in;
  sizes_in.assign(static_cast<std::size_t>(w), 0);
  std::uint64_t total_in = 0;
  if (receiving)
    for (int s = 0; s < w; ++s) {
      sizes_in[static_cast<std::size_t>(s)] = block_header + chunk_of(n, 1, w, s).len * 4;
      total_in += sizes_in[static_cast<std::size_t>(s)];
    }
  const std::uint64_t out_bytes = block_header + mine.len * 4;
  std::byte* out = r.ws.dense.send.reserve(out_bytes, r.mem);
  std::byte* in = r.ws.dense.recv.reserve(total_in + 1, r.mem);
  if (auto st = put_block(r, out, r.poison, mine.len * 4); !st.ok()) return st;
  if (mine.len > 0)
    if (auto st = r.mem.copy(out + block_header, acc, mine.len * 4); !st.ok()) return st;
  {
    timer t(r.times, &phase_times::comm_s);
    count_traffic(r, out_bytes, total_in);
    if (to_all) {
      if (auto st = r.comm.allgatherv(out, out_bytes, in, sizes_in); !st.ok()) return st;
    } else {
      auto& sizes_out = r.ws.dense.sizes_out;
      sizes_out.assign(static_cast<std::size_t>(w), 0);
      sizes_out[static_cast<std::size_t>(root)] = out_bytes;
      if (auto st = r.comm.alltoallv(out, sizes_out, in, sizes_in); !st.ok()) return st;
    }
  }
  if (!receiving) return {};
  auto& offsets = r.ws.dense.sizes_out;
  auto& caps = r.ws.dense.sizes_in;  // each block's capacity: its size less the header
  offsets.assign(static_cast<std::size_t>(w), 0);
  for (int s = 0; s < w; ++s) {
    const auto i = static_cast<std::size_t>(s);
    if (s > 0) offsets[i] = offsets[i - 1] + caps[i - 1] + block_header;
    caps[i] -= block_header;
  }
  auto& lengths = r.ws.dense.lengths;  // read for their error words only
  if (auto st = read_blocks(r, in, offsets, caps, lengths); !st.ok()) return st;
  if (r.failed()) return {};
  for (int s = 0; s < w; ++s) {
    const range c = chunk_of(n, 1, w, s);
    if (c.len > 0)
      if (auto st = r.mem.copy(dst + c.begin,
                               in + offsets[static_cast<std::size_t>(s)] + block_header, c.len * 4);
          !st.ok())
        return st;
  }
  return {};
}

}  // namespace

status dense_reduce(run& r, float* values, std::uint64_t n, std::uint64_t split, float alpha_lo,
                    float alpha_hi) {
  const range mine = chunk_of(n, 1, r.comm.size(), r.comm.rank());
  float* acc = r.ws.accum.as<float>(mine.len + 1, r.mem);
  if (auto st =
          scatter_and_sum(r, {values, n, dtype::f32, 0}, acc, mine, split, alpha_lo, alpha_hi);
      !st.ok())
    return st;
  return spread(r, acc, mine, n, values, -1);
}

status dense_reduce_to_root(run& r, const_tensor_view src, float* dst, float alpha, int root) {
  const range mine = chunk_of(src.n, 1, r.comm.size(), r.comm.rank());
  float* acc = r.ws.accum.as<float>(mine.len + 1, r.mem);
  if (auto st = scatter_and_sum(r, src, acc, mine, src.n, alpha, alpha); !st.ok()) return st;
  return spread(r, acc, mine, src.n, dst, root);
}

}  // namespace gradcodec::comm::detail
