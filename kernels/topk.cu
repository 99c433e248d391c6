// SPDX-License-Identifier: Apache-2.0
//! @file
//! Exact top-k on the GPU (docs/codecs.md "topk"), the radix select of
//! blocks/radix_select.hpp, all on the caller's stream without a host wait:
//!
//! 1. three histogram passes over the keys (block-local shared-memory histograms merged
//!    into a global one), each followed by a one-block kernel that descends into the bin
//!    holding the k-th largest key (the radix state stays in device memory);
//! 2. compaction in tiles of 4096 elements: count the keys above T and equal to T per
//!    tile, scan the tile counts, then write every selected element (key > T, or key == T
//!    among the first need_equal in index order) at its rank, values and indices in index
//!    order, so the frame's indices ascend as the format requires.
//!
//! Error feedback: p = g + e into the workspace, top-k of p, e = p everywhere, then
//! e = p - decoded at the k sent indices. Decode checks every index on the device and
//! waits for that verdict before writing (an out-of-range or unordered index must leave
//! the output untouched).
#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>

#include "codecs.hpp"
#include "common.cuh"
#include "gradcodec/blocks/layout.hpp"
#include "gradcodec/blocks/radix_select.hpp"
#include "gradcodec/blocks/sparse.hpp"

namespace gradcodec::cuda {

namespace {

constexpr unsigned hist_threads = 512;
constexpr unsigned tile_threads = 256;
constexpr unsigned tile_items = 16;
constexpr std::uint64_t tile_size = tile_threads * tile_items;

std::uint64_t tiles_of(std::uint64_t n) { return (n + tile_size - 1) / tile_size; }

//! The workspace after the status words: the radix state, one histogram, and per tile
//! the counts above and equal to T and their exclusive scans.
struct select_space {
  blocks::radix_state* state;
  std::uint32_t* hist;
  std::uint32_t* tile_above;
  std::uint32_t* tile_equal;
  std::uint64_t* above_before;
  std::uint64_t* equal_before;
  float* p;  //!< error feedback: g + e

  static std::size_t bytes(std::uint64_t n, bool feedback) {
    const std::uint64_t t = tiles_of(n);
    return 256 + blocks::radix_max_bins * 4 + t * (4 + 4 + 8 + 8) + 64 + (feedback ? n * 4 : 0);
  }
  static select_space carve(mutable_bytes ws, std::uint64_t n) {
    std::byte* at = after_status(ws).data();
    const std::uint64_t t = tiles_of(n);
    select_space s{};
    s.state = reinterpret_cast<blocks::radix_state*>(at);
    at += 256;
    s.hist = reinterpret_cast<std::uint32_t*>(at);
    at += blocks::radix_max_bins * 4;
    s.above_before = reinterpret_cast<std::uint64_t*>(at);
    at += t * 8;
    s.equal_before = reinterpret_cast<std::uint64_t*>(at);
    at += t * 8;
    s.tile_above = reinterpret_cast<std::uint32_t*>(at);
    at += t * 4;
    s.tile_equal = reinterpret_cast<std::uint32_t*>(at);
    at += t * 4;
    at += 64 - reinterpret_cast<std::uintptr_t>(at) % 64;
    s.p = reinterpret_cast<float*>(at);
    return s;
  }
};

__global__ void init_state_kernel(blocks::radix_state* st, std::uint64_t k) {
  *st = blocks::radix_state{};
  st->remaining = k;
}

//! Histogram of the keys still in the running; the first pass also notes a non-finite value.
__global__ void hist_kernel(values_in v, std::uint64_t n, int pass,
                            const blocks::radix_state* state, std::uint32_t* hist,
                            status_words* st) {
  __shared__ std::uint32_t local[blocks::radix_max_bins];
  const std::uint32_t bins = blocks::radix_bins(pass);
  for (std::uint32_t b = threadIdx.x; b < bins; b += blockDim.x) local[b] = 0;
  __syncthreads();
  const blocks::radix_state s = *state;
  bool bad = false;
  for (std::uint64_t i = thread_index(); i < n; i += thread_stride()) {
    const float x = v(i);
    bad |= !blocks::is_finite(x);
    const std::uint32_t key = blocks::sparse_key(x);
    if (s.matches(key)) atomicAdd(&local[blocks::radix_state::bin(key, pass)], 1u);
  }
  if (pass == 0 && bad) atomicOr(&st->nonfinite, 1u);
  __syncthreads();
  for (std::uint32_t b = threadIdx.x; b < bins; b += blockDim.x)
    if (local[b] != 0) atomicAdd(&hist[b], local[b]);
}

__global__ void descend_kernel(blocks::radix_state* state, const std::uint32_t* hist, int pass) {
  state->descend(hist, pass);
}

//! Per tile: how many keys are above T and equal to T.
__global__ void tile_count_kernel(values_in v, std::uint64_t n, const blocks::radix_state* state,
                                  std::uint32_t* tile_above, std::uint32_t* tile_equal) {
  using reduce = cub::BlockReduce<std::uint32_t, tile_threads>;
  __shared__ typename reduce::TempStorage tmp;
  const std::uint32_t t_key = state->threshold();
  const std::uint64_t begin = blockIdx.x * tile_size + threadIdx.x * tile_items;
  std::uint32_t above = 0, equal = 0;
  for (std::uint64_t i = begin; i < begin + tile_items && i < n; ++i) {
    const std::uint32_t key = blocks::sparse_key(v(i));
    above += key > t_key ? 1u : 0u;
    equal += key == t_key ? 1u : 0u;
  }
  const std::uint32_t total_above = reduce(tmp).Sum(above);
  __syncthreads();
  const std::uint32_t total_equal = reduce(tmp).Sum(equal);
  if (threadIdx.x == 0) {
    tile_above[blockIdx.x] = total_above;
    tile_equal[blockIdx.x] = total_equal;
  }
}

//! Exclusive scans of the tile counts (one block; tiles in chunks of its size).
__global__ void tile_scan_kernel(std::uint64_t tiles, const std::uint32_t* tile_above,
                                 const std::uint32_t* tile_equal, std::uint64_t* above_before,
                                 std::uint64_t* equal_before) {
  using scan = cub::BlockScan<std::uint64_t, tile_threads>;
  __shared__ typename scan::TempStorage tmp;
  std::uint64_t carry_above = 0, carry_equal = 0;
  for (std::uint64_t base = 0; base < tiles; base += tile_threads) {
    const std::uint64_t t = base + threadIdx.x;
    const std::uint64_t a = t < tiles ? tile_above[t] : 0, e = t < tiles ? tile_equal[t] : 0;
    std::uint64_t a_before = 0, e_before = 0, a_sum = 0, e_sum = 0;
    scan(tmp).ExclusiveSum(a, a_before, a_sum);
    __syncthreads();
    scan(tmp).ExclusiveSum(e, e_before, e_sum);
    __syncthreads();
    if (t < tiles) {
      above_before[t] = carry_above + a_before;
      equal_before[t] = carry_equal + e_before;
    }
    carry_above += a_sum;
    carry_equal += e_sum;
  }
}

struct sparse_out {
  std::uint8_t* values;
  std::uint8_t* index;
  dtype wire;
  bool index64;
};

//! Writes the selected elements of each tile at their ranks.
__global__ void tile_write_kernel(values_in v, std::uint64_t n, const blocks::radix_state* state,
                                  const std::uint64_t* above_before,
                                  const std::uint64_t* equal_before, sparse_out out) {
  using scan = cub::BlockScan<std::uint32_t, tile_threads>;
  __shared__ typename scan::TempStorage tmp;
  const std::uint32_t t_key = state->threshold();
  const std::uint64_t need = state->need_equal();
  const std::uint64_t begin = blockIdx.x * tile_size + threadIdx.x * tile_items;
  std::uint32_t keys[tile_items];
  std::uint32_t equal = 0;
  for (unsigned j = 0; j < tile_items; ++j) {
    const std::uint64_t i = begin + j;
    keys[j] = i < n ? blocks::sparse_key(v(i)) : 0u;
    equal += i < n && keys[j] == t_key ? 1u : 0u;
  }
  std::uint32_t equal_rank = 0, total = 0;
  scan(tmp).ExclusiveSum(equal, equal_rank, total);
  __syncthreads();
  // Equal keys of this thread get global equal-ranks from eq0 on.
  const std::uint64_t eq0 = equal_before[blockIdx.x] + equal_rank;
  std::uint32_t chosen = 0;
  std::uint64_t e = eq0;
  for (unsigned j = 0; j < tile_items; ++j) {
    const std::uint64_t i = begin + j;
    if (i >= n) break;
    if (keys[j] > t_key) {
      ++chosen;
    } else if (keys[j] == t_key) {
      chosen += e < need ? 1u : 0u;
      ++e;
    }
  }
  std::uint32_t rank = 0;
  scan(tmp).ExclusiveSum(chosen, rank, total);
  const std::uint64_t eb = equal_before[blockIdx.x];
  std::uint64_t pos = above_before[blockIdx.x] + (eb < need ? eb : need) + rank;
  e = eq0;
  for (unsigned j = 0; j < tile_items; ++j) {
    const std::uint64_t i = begin + j;
    if (i >= n) break;
    bool take = keys[j] > t_key;
    if (keys[j] == t_key) take = e++ < need;
    if (!take) continue;
    const float x = v(i);
    if (out.wire == dtype::f32)
      reinterpret_cast<float*>(out.values)[pos] = x;
    else
      reinterpret_cast<std::uint16_t*>(out.values)[pos] =
          out.wire == dtype::f16 ? blocks::f32_to_f16(x) : blocks::f32_to_bf16(x);
    if (out.index64)
      reinterpret_cast<std::uint64_t*>(out.index)[pos] = i;
    else
      reinterpret_cast<std::uint32_t*>(out.index)[pos] = static_cast<std::uint32_t>(i);
    ++pos;
  }
}

//! Sparse values and indices of a payload.
struct sparse_in {
  const std::uint8_t* values;
  const std::uint8_t* index;
  dtype type;
  bool index64;
  __device__ __forceinline__ std::uint64_t index_at(std::uint64_t j) const {
    return index64 ? reinterpret_cast<const std::uint64_t*>(index)[j]
                   : reinterpret_cast<const std::uint32_t*>(index)[j];
  }
  __device__ __forceinline__ float value_at(std::uint64_t j) const {
    if (type == dtype::f32) return reinterpret_cast<const float*>(values)[j];
    const std::uint16_t h = reinterpret_cast<const std::uint16_t*>(values)[j];
    return type == dtype::f16 ? blocks::f16_to_f32(h) : blocks::bf16_to_f32(h);
  }
};

//! residual = p everywhere (decoded is +0.0 off the sent indices).
__global__ void residual_dense_kernel(const float* p, std::uint64_t n, void* res, dtype rt) {
  for (std::uint64_t i = thread_index(); i < n; i += thread_stride())
    store_elem(res, rt, i, blocks::fsub_nan_first(p[i], 0.0f));
}

//! residual = p - decoded at the sent indices.
__global__ void residual_sent_kernel(const float* p, sparse_in s, std::uint64_t k, void* res,
                                     dtype rt) {
  for (std::uint64_t j = thread_index(); j < k; j += thread_stride()) {
    const std::uint64_t i = s.index_at(j);
    store_elem(res, rt, i, blocks::fsub_nan_first(p[i], blocks::canonicalize_nan(s.value_at(j))));
  }
}

__global__ void check_indices_kernel(sparse_in s, std::uint64_t n, std::uint64_t k,
                                     status_words* st) {
  for (std::uint64_t j = thread_index(); j < k; j += thread_stride()) {
    const std::uint64_t i = s.index_at(j);
    if (i >= n || (j > 0 && i <= s.index_at(j - 1))) atomicOr(&st->bad_index, 1u);
  }
}

__global__ void zeros_kernel(std::uint64_t n, decode_target out) {
  for (std::uint64_t i = thread_index(); i < n; i += thread_stride()) out.emit(i, 0.0f);
}

__global__ void scatter_kernel(sparse_in s, std::uint64_t k, decode_target out) {
  for (std::uint64_t j = thread_index(); j < k; j += thread_stride())
    out.emit(s.index_at(j), s.value_at(j));
}

//! Selects the top k of v (n elements) into the payload.
status select_into(const detail::encode_call& c, values_in v, std::uint64_t n, std::uint64_t k,
                   const blocks::sparse_layout& l, bool index64) {
  const cudaStream_t s = stream_of(c.stream);
  const select_space sp = select_space::carve(c.workspace, n);
  const std::uint64_t tiles = tiles_of(n);
  init_state_kernel<<<1, 1, 0, s>>>(sp.state, k);
  GRADCODEC_CUDA_LAUNCHED("init_state_kernel");
  for (int pass = 0; pass < blocks::radix_pass_count; ++pass) {
    GRADCODEC_CUDA_TRY(cudaMemsetAsync(sp.hist, 0, blocks::radix_max_bins * 4, s));
    hist_kernel<<<grid_for(n, hist_threads), hist_threads, 0, s>>>(v, n, pass, sp.state, sp.hist,
                                                                   status_of(c.workspace));
    GRADCODEC_CUDA_LAUNCHED("hist_kernel");
    descend_kernel<<<1, 1, 0, s>>>(sp.state, sp.hist, pass);
    GRADCODEC_CUDA_LAUNCHED("descend_kernel");
  }
  tile_count_kernel<<<static_cast<unsigned>(tiles), tile_threads, 0, s>>>(
      v, n, sp.state, sp.tile_above, sp.tile_equal);
  GRADCODEC_CUDA_LAUNCHED("tile_count_kernel");
  tile_scan_kernel<<<1, tile_threads, 0, s>>>(tiles, sp.tile_above, sp.tile_equal, sp.above_before,
                                              sp.equal_before);
  GRADCODEC_CUDA_LAUNCHED("tile_scan_kernel");
  auto* payload = reinterpret_cast<std::uint8_t*>(c.payload);
  tile_write_kernel<<<static_cast<unsigned>(tiles), tile_threads, 0, s>>>(
      v, n, sp.state, sp.above_before, sp.equal_before,
      sparse_out{payload + l.values_offset, payload + l.index_offset, c.wire, index64});
  GRADCODEC_CUDA_LAUNCHED("tile_write_kernel");
  if (auto st = zero_bytes(c.payload, l.values_bytes, l.index_offset, c.stream); !st.ok())
    return st;
  return zero_bytes(c.payload, l.index_offset + l.index_bytes, l.total, c.stream);
}

status encode_impl(const detail::encode_call& c, tensor_view residual) {
  if (auto st = check_frame_alignment(c.payload); !st.ok()) return st;
  const std::uint64_t n = c.in.n, k = sparse_count(c.spec, n);
  const bool index64 = (c.hdr.flags & flag_index64) != 0;
  const blocks::sparse_layout l = blocks::sparse_layout_of(k, dtype_size(c.wire), index64);
  if (l.total > c.capacity)
    return {status_code::output_too_small, "output buffer too small for the payload"};
  if (auto st = begin_frame(c.workspace, c.stream); !st.ok()) return st;
  const cudaStream_t s = stream_of(c.stream);
  values_in v{c.in.data, c.in.type};
  const select_space sp = select_space::carve(c.workspace, n);
  if (residual.data != nullptr && n > 0) {
    if (auto st = feedback_sum(c.in, residual, sp.p, c.stream); !st.ok()) return st;
    v = {sp.p, dtype::f32};
  }
  if (k > 0)
    if (auto st = select_into(c, v, n, k, l, index64); !st.ok()) return st;
  if (residual.data != nullptr && n > 0) {
    residual_dense_kernel<<<grid_for(n, 256), 256, 0, s>>>(sp.p, n, residual.data, residual.type);
    GRADCODEC_CUDA_LAUNCHED("residual_dense_kernel");
    const auto* payload = reinterpret_cast<const std::uint8_t*>(c.payload);
    residual_sent_kernel<<<grid_for(k, 256), 256, 0, s>>>(
        sp.p, sparse_in{payload + l.values_offset, payload + l.index_offset, c.wire, index64}, k,
        residual.data, residual.type);
    GRADCODEC_CUDA_LAUNCHED("residual_sent_kernel");
  }
  c.hdr.count = k;
  c.hdr.payload_bytes = l.total;
  return finish_frame(c.hdr, c.payload, c.workspace, c.stream);
}

}  // namespace

std::size_t topk_workspace(const codec_spec&, const_tensor_view shape, operation op) {
  const bool encoding = op == operation::encode || op == operation::encode_with_feedback;
  return status_bytes +
         (encoding ? select_space::bytes(shape.n, op == operation::encode_with_feedback) : 0);
}

status topk_encode(const detail::encode_call& c) { return encode_impl(c, {}); }

status topk_encode_feedback(const detail::feedback_call& c) {
  return encode_impl(c.enc, c.residual);
}

status topk_decode(const detail::decode_call& c) {
  if (auto st = check_frame_alignment(c.payload); !st.ok()) return st;
  const std::uint64_t n = c.hdr.n, k = c.hdr.count;
  if (n > 0 && k == 0) return {status_code::corrupt_frame, "topk frame with no elements"};
  const bool index64 = (c.hdr.flags & flag_index64) != 0;
  const blocks::sparse_layout l = blocks::sparse_layout_of(k, dtype_size(c.hdr.type), index64);
  const auto* payload = reinterpret_cast<const std::uint8_t*>(c.payload);
  const sparse_in in{payload + l.values_offset, payload + l.index_offset, c.hdr.type, index64};
  const cudaStream_t s = stream_of(c.stream);
  if (k > 0) {
    // The verdict on the indices comes back to the host before anything is written.
    GRADCODEC_CUDA_TRY(cudaMemsetAsync(c.workspace.data(), 0, sizeof(status_words), s));
    check_indices_kernel<<<grid_for(k, 256), 256, 0, s>>>(in, n, k, status_of(c.workspace));
    GRADCODEC_CUDA_LAUNCHED("check_indices_kernel");
    status_words verdict{};
    GRADCODEC_CUDA_TRY(
        cudaMemcpyAsync(&verdict, c.workspace.data(), sizeof verdict, cudaMemcpyDeviceToHost, s));
    GRADCODEC_CUDA_TRY(cudaStreamSynchronize(s));
    if (verdict.bad_index != 0)
      return {status_code::corrupt_frame, "sparse indices out of range or not strictly ascending"};
  }
  const decode_target out = target_of(c);
  if (!c.accumulate && n > 0) {
    zeros_kernel<<<grid_for(n, 256), 256, 0, s>>>(n, out);
    GRADCODEC_CUDA_LAUNCHED("zeros_kernel");
  }
  if (k > 0) {
    scatter_kernel<<<grid_for(k, 256), 256, 0, s>>>(in, k, out);
    GRADCODEC_CUDA_LAUNCHED("scatter_kernel");
  }
  return {};
}

}  // namespace gradcodec::cuda
