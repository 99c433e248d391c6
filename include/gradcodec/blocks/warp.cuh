// SPDX-License-Identifier: Apache-2.0
//! @file
//! Per-warp pieces for CUDA kernels: the canonical sum of a group split over the 32 lanes
//! of a warp in exactly the order of blocks/canonical_sum.hpp, a count, and the bucket
//! scan. `warp_reducer` plugs into the scale functions of blocks/quant.hpp and
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
#include "gradcodec/blocks/quant.hpp"

namespace gradcodec::blocks {

inline constexpr unsigned full_warp = 0xFFFFFFFFu;

//! The sums of chunks c and c + 1 (of 256 terms, clipped to len) of the canonical sum, in
//! lane 0 (`even`) and lane 16, which lane 0 also gets (`odd`; 0 when chunk c + 1 is past
//! len). Lanes 0-15 take chunk c and lanes 16-31 chunk c + 1; lane j of a half sums terms
//! j, j+16, ... of its chunk in order (the 16 strided lanes of the definition) and the
//! halves fold 8-4-2-1 with shuffles.
struct chunk_pair {
  float even, odd;
};
template <class Term>
__device__ chunk_pair warp_chunk_pair(std::uint64_t c, std::uint64_t len, Term& term) {
  const unsigned lane = threadIdx.x % 32u, half = lane / 16u, j = lane % 16u;
  const std::uint64_t begin = (c + half) * sum_chunk;
  float acc = 0.0f;
  for (std::uint64_t t = j; t < sum_chunk && begin + t < len; t += sum_lanes)
    acc = fadd(acc, term(begin + t));
  for (unsigned h = sum_lanes / 2; h >= 1; h /= 2) {
    const float other = __shfl_down_sync(full_warp, acc, h, 16);
    if (j < h) acc = fadd(acc, other);
  }
  return {acc, __shfl_sync(full_warp, acc, 16)};
}

//! The canonical sum of term(0 .. len) by one warp: chunk pairs in turn, lane 0 combining
//! the chunk sums pairwise in chunk order.
template <class Term>
__device__ float warp_canonical_sum(std::uint64_t len, Term term) {
  const unsigned lane = threadIdx.x % 32u;
  pairwise_sum chunks;  // lane 0's is the one that counts
  for (std::uint64_t c = 0; c * sum_chunk < len; c += 2u) {
    const chunk_pair s = warp_chunk_pair(c, len, term);
    if (lane == 0) {
      chunks.push(s.even);
      if ((c + 1) * sum_chunk < len) chunks.push(s.odd);
    }
  }
  return __shfl_sync(full_warp, lane == 0 ? chunks.total() : 0.0f, 0);
}

//! The canonical sum of term(0 .. len) by every warp of the block (blockDim.x = 32·W, W a
//! power of two up to 32; every thread must call it and gets the result). A round takes
//! 2W chunks, a pair per warp; a complete round's pair sums fold in warp 0 as the subtree
//! they form (left + right at every level) and join thread 0's pairwise sum at height
//! log2(2W), which the binary counter of the definition gives an aligned group of 2W chunk
//! sums; the last, incomplete round joins pair by pair and chunk by chunk.
template <class Term>
__device__ float block_canonical_sum(std::uint64_t len, Term term) {
  __shared__ float pair[32];
  __shared__ float total;
  const unsigned lane = threadIdx.x % 32u, warp = threadIdx.x / 32u, warps = blockDim.x / 32u;
  const std::uint64_t chunks = (len + sum_chunk - 1) / sum_chunk;
  int round_height = 1;
  while ((1u << round_height) < 2u * warps) ++round_height;
  pairwise_sum sum;  // thread 0's is the one that counts
  for (std::uint64_t c0 = 0; c0 < chunks; c0 += 2u * warps) {
    const std::uint64_t c = c0 + 2u * warp;
    if (c < chunks) {
      const chunk_pair s = warp_chunk_pair(c, len, term);
      if (lane == 0) pair[warp] = c + 1 < chunks ? fadd(s.even, s.odd) : s.even;
    }
    __syncthreads();
    if (c0 + 2u * warps <= chunks) {
      if (warp == 0) {
        float acc = lane < warps ? pair[lane] : 0.0f;
        for (unsigned off = 1; off < warps; off *= 2) {
          const float right = __shfl_down_sync(full_warp, acc, off);
          if (lane % (2u * off) == 0) acc = fadd(acc, right);
        }
        if (lane == 0) sum.push(acc, round_height);
      }
    } else if (threadIdx.x == 0) {
      for (std::uint64_t k = c0; k < chunks; k += 2u)
        sum.push(pair[(k - c0) / 2u], k + 1 < chunks ? 1 : 0);
    }
    __syncthreads();  // pair[] is read before the next round writes it
  }
  if (threadIdx.x == 0) total = sum.total();
  __syncthreads();
  return total;
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

//! An accumulator (bucket_scan, minmax_range) of value(j) for j = first, first + stride,
//! ... below len.
template <class Acc, class Value>
__device__ Acc strided(std::uint64_t len, Value& value, std::uint64_t first, std::uint64_t stride) {
  Acc a;
  for (std::uint64_t j = first; j < len; j += stride) a.add(value(j));
  return a;
}

//! Folds the lanes' accumulators, so every lane holds the warp's (max and "all finite",
//! and minmax_range, whose add makes −0.0 +0.0, do not depend on the order).
__device__ inline void warp_fold(bucket_scan& m) {
  for (unsigned off = 16; off >= 1; off /= 2) {
    const float other = __shfl_xor_sync(full_warp, m.max_abs, off);
    if (other > m.max_abs) m.max_abs = other;
  }
  m.finite = __all_sync(full_warp, m.finite) != 0;
}
__device__ inline void warp_fold(minmax_range& r) {
  for (unsigned off = 16; off >= 1; off /= 2) {
    const float lo = __shfl_xor_sync(full_warp, r.lo, off);
    const float hi = __shfl_xor_sync(full_warp, r.hi, off);
    if (lo < r.lo) r.lo = lo;
    if (hi > r.hi) r.hi = hi;
  }
}

//! bucket_scan over value(0 .. len) by the whole warp.
template <class Value>
__device__ bucket_scan warp_bucket_scan(std::uint64_t len, Value value) {
  bucket_scan m = strided<bucket_scan>(len, value, threadIdx.x % 32u, 32u);
  warp_fold(m);
  return m;
}

//! minmax_range over value(0 .. len) by the whole warp (of a finite bucket).
template <class Value>
__device__ minmax_range warp_minmax_range(std::uint64_t len, Value value) {
  minmax_range r = strided<minmax_range>(len, value, threadIdx.x % 32u, 32u);
  warp_fold(r);
  return r;
}

//! The block's versions (blockDim.x a multiple of 32): each warp folds its share, then
//! every thread folds the warps' (x, y) pairs with fold(x, y, x_w, y_w); the results do
//! not depend on the order.
template <class Fold>
__device__ void block_fold(float& x, float& y, Fold fold) {
  __shared__ float xs[32], ys[32];
  if (threadIdx.x % 32u == 0) {
    xs[threadIdx.x / 32u] = x;
    ys[threadIdx.x / 32u] = y;
  }
  __syncthreads();
  for (unsigned w = 0; w < blockDim.x / 32u; ++w) fold(x, y, xs[w], ys[w]);
  __syncthreads();  // read before the next call writes them
}

template <class Value>
__device__ bucket_scan block_bucket_scan(std::uint64_t len, Value value) {
  bucket_scan m = strided<bucket_scan>(len, value, threadIdx.x, blockDim.x);
  warp_fold(m);
  float finite = m.finite ? 1.0f : 0.0f;
  block_fold(m.max_abs, finite, [](float& a, float& f, float a_w, float f_w) {
    if (a_w > a) a = a_w;
    if (f_w < f) f = f_w;
  });
  m.finite = finite != 0.0f;
  return m;
}

template <class Value>
__device__ minmax_range block_minmax_range(std::uint64_t len, Value value) {
  minmax_range r = strided<minmax_range>(len, value, threadIdx.x, blockDim.x);
  warp_fold(r);
  block_fold(r.lo, r.hi, [](float& lo, float& hi, float lo_w, float hi_w) {
    if (lo_w < lo) lo = lo_w;
    if (hi_w > hi) hi = hi_w;
  });
  return r;
}

template <class Pred>
__device__ std::uint64_t block_count(std::uint64_t len, Pred pred) {
  __shared__ unsigned long long part[32];
  unsigned long long c = 0;
  for (std::uint64_t j = threadIdx.x; j < len; j += blockDim.x) c += pred(j) ? 1u : 0u;
  for (unsigned off = 16; off >= 1; off /= 2) c += __shfl_xor_sync(full_warp, c, off);
  if (threadIdx.x % 32u == 0) part[threadIdx.x / 32u] = c;
  __syncthreads();
  std::uint64_t total = 0;
  for (unsigned w = 0; w < blockDim.x / 32u; ++w) total += part[w];
  __syncthreads();
  return total;
}

//! The reducers the scale functions of blocks/quant.hpp and blocks/sign.hpp and the
//! PowerSGD orthogonalization take (canonical_sum.hpp's sequential_reducer on one thread):
//! a group split over one warp, or over the whole block for groups long enough to keep
//! its warps busy. `scan` and `range` are the bucket scans of the bucketed codecs.
struct warp_reducer {
  template <class Term>
  __device__ float sum(std::uint64_t len, Term term) const {
    return warp_canonical_sum(len, term);
  }
  template <class Pred>
  __device__ std::uint64_t count(std::uint64_t len, Pred pred) const {
    return warp_count(len, pred);
  }
  template <class Value>
  __device__ bucket_scan scan(std::uint64_t len, Value value) const {
    return warp_bucket_scan(len, value);
  }
  template <class Value>
  __device__ minmax_range range(std::uint64_t len, Value value) const {
    return warp_minmax_range(len, value);
  }
  template <class F>
  __device__ void each(std::uint64_t len, F f) const {
    for (std::uint64_t j = threadIdx.x % 32u; j < len; j += 32u) f(j);
  }
  __device__ void sync() const { __syncwarp(); }
};

//! blockDim.x = 32·W, W a power of two up to 32.
struct block_reducer {
  template <class Term>
  __device__ float sum(std::uint64_t len, Term term) const {
    return block_canonical_sum(len, term);
  }
  template <class Pred>
  __device__ std::uint64_t count(std::uint64_t len, Pred pred) const {
    return block_count(len, pred);
  }
  template <class Value>
  __device__ bucket_scan scan(std::uint64_t len, Value value) const {
    return block_bucket_scan(len, value);
  }
  template <class Value>
  __device__ minmax_range range(std::uint64_t len, Value value) const {
    return block_minmax_range(len, value);
  }
  template <class F>
  __device__ void each(std::uint64_t len, F f) const {
    for (std::uint64_t j = threadIdx.x; j < len; j += blockDim.x) f(j);
  }
  __device__ void sync() const { __syncthreads(); }
};

}  // namespace gradcodec::blocks
