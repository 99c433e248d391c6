// SPDX-License-Identifier: Apache-2.0
//! @file
//! Per-warp pieces for CUDA kernels: the canonical sum of a group split over the 32 lanes
//! of a warp in exactly the order of blocks/canonical_sum.hpp, a count, and the bucket
//! scan. `warp_reducer` plugs into the scale functions of blocks/quantize.hpp and
//! blocks/sign.hpp, so a kernel that gives each bucket to one warp writes the library's
//! scales. Every lane of the warp must call each function (they synchronize the warp);
//! every lane gets the result.
#pragma once

#if !defined(__CUDACC__)
#error "gradcodec/blocks/warp.cuh holds device code: include it from CUDA sources only"
#endif

#include <cstdint>

#include "gradcodec/blocks/canonical_sum.hpp"
#include "gradcodec/blocks/fmath.hpp"
#include "gradcodec/blocks/quantize.hpp"

namespace gradcodec::blocks {

inline constexpr unsigned full_warp = 0xFFFFFFFFu;

//! The canonical sum of term(0 .. len). Lanes 0-15 take the even chunks of 256 terms and
//! lanes 16-31 the odd ones; lane j of a half sums terms j, j+16, ... of its chunk in order
//! (the 16 strided lanes of the definition), the halves fold 8-4-2-1 with shuffles, and
//! lane 0 combines the chunk sums pairwise in chunk order.
template <class Term>
__device__ float warp_canonical_sum(std::uint64_t len, Term term) {
  const unsigned lane = threadIdx.x % 32u, half = lane / 16u, j = lane % 16u;
  pairwise_sum chunks;  // lane 0's is the one that counts
  for (std::uint64_t c0 = 0; c0 < len; c0 += 2u * sum_chunk) {
    const std::uint64_t begin = c0 + half * sum_chunk;
    float acc = 0.0f;
    for (std::uint64_t t = j; t < sum_chunk && begin + t < len; t += sum_lanes)
      acc = fadd(acc, term(begin + t));
    for (unsigned h = sum_lanes / 2; h >= 1; h /= 2) {
      const float other = __shfl_down_sync(full_warp, acc, h, 16);
      if (j < h) acc = fadd(acc, other);
    }
    const float odd = __shfl_sync(full_warp, acc, 16);
    if (lane == 0) {
      chunks.push(acc);
      if (c0 + sum_chunk < len) chunks.push(odd);
    }
  }
  return __shfl_sync(full_warp, lane == 0 ? chunks.total() : 0.0f, 0);
}

//! How many j in [0, len) satisfy pred(j).
template <class Pred>
__device__ std::uint64_t warp_count(std::uint64_t len, Pred pred) {
  const unsigned lane = threadIdx.x % 32u;
  std::uint64_t c = 0;
  for (std::uint64_t base = 0; base < len; base += 32u) {
    const bool hit = base + lane < len && pred(base + lane);
    c += static_cast<std::uint64_t>(__popc(__ballot_sync(full_warp, hit)));
  }
  return c;
}

struct warp_reducer {
  template <class Term>
  __device__ float sum(std::uint64_t len, Term term) const {
    return warp_canonical_sum(len, term);
  }
  template <class Pred>
  __device__ std::uint64_t count(std::uint64_t len, Pred pred) const {
    return warp_count(len, pred);
  }
  template <class F>
  __device__ void each(std::uint64_t len, F f) const {
    for (std::uint64_t j = threadIdx.x % 32u; j < len; j += 32u) f(j);
  }
  __device__ void sync() const { __syncwarp(); }
};

//! bucket_scan over value(0 .. len) by the whole warp (max and "all finite" do not depend
//! on the order).
template <class Value>
__device__ bucket_scan warp_bucket_scan(std::uint64_t len, Value value) {
  const unsigned lane = threadIdx.x % 32u;
  bucket_scan m;
  for (std::uint64_t j = lane; j < len; j += 32u) m.add(value(j));
  for (unsigned off = 16; off >= 1; off /= 2) {
    const float other = __shfl_xor_sync(full_warp, m.max_abs, off);
    if (other > m.max_abs) m.max_abs = other;
  }
  m.finite = __all_sync(full_warp, m.finite) != 0;
  return m;
}

//! minmax_range over value(0 .. len) by the whole warp (of a finite bucket).
template <class Value>
__device__ minmax_range warp_minmax_range(std::uint64_t len, Value value) {
  const unsigned lane = threadIdx.x % 32u;
  minmax_range r;
  for (std::uint64_t j = lane; j < len; j += 32u) r.add(value(j));
  for (unsigned off = 16; off >= 1; off /= 2) {
    const float lo = __shfl_xor_sync(full_warp, r.lo, off);
    const float hi = __shfl_xor_sync(full_warp, r.hi, off);
    if (lo < r.lo) r.lo = lo;
    if (hi > r.hi) r.hi = hi;
  }
  return r;
}

}  // namespace gradcodec::blocks
