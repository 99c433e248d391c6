// SPDX-License-Identifier: Apache-2.0
//! @file
//! The sparse selection kernels (select.cuh): radix histograms, the descent, the tiled
//! compaction, candidate counts, the sparse residual and the sparse decode.
#include <algorithm>

#include <cub/block/block_load.cuh>
#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>

#include "select.cuh"

namespace gradcodec::cuda {

namespace {

using policy::hist_threads;
using policy::threads;
using policy::tile_items;
using policy::tile_threads;
constexpr std::uint64_t tile_size = tile_threads * tile_items;

std::uint64_t tiles_of(std::uint64_t n) { return (n + tile_size - 1) / tile_size; }

//! A tile's values through values_in, for cub::BlockLoad: it reads them striped (a warp's
//! load spans 32 consecutive elements) and transposes them through shared memory, so
//! each thread gets its tile_items consecutive elements without strided global reads.
struct tile_source {
  values_in v;
  std::uint64_t begin;
  __device__ __forceinline__ float operator[](std::uint64_t j) const { return v(begin + j); }
};
using tile_load = cub::BlockLoad<float, tile_threads, tile_items, cub::BLOCK_LOAD_TRANSPOSE>;

//! Thread threadIdx.x's tile_items consecutive values of tile blockIdx.x (0 past n), and
//! the index of the first.
__device__ std::uint64_t load_tile(values_in v, std::uint64_t n,
                                   typename tile_load::TempStorage& tmp, float (&x)[tile_items]) {
  const std::uint64_t tile_begin = blockIdx.x * tile_size;
  const std::uint64_t valid = n - tile_begin < tile_size ? n - tile_begin : tile_size;
  tile_load(tmp).Load(tile_source{v, tile_begin}, x, static_cast<int>(valid), 0.0f);
  return tile_begin + threadIdx.x * tile_items;
}

__global__ void rule_init_kernel(select_rule* rule, float tau, std::uint64_t m) {
  *rule = select_rule{};
  rule->state.remaining = m;
  rule->tau = tau;
}

//! Histogram of the participants still in the running; notes non-finite values.
__global__ void hist_kernel(values_in v, std::uint64_t n, int pass, const select_rule* rule,
                            unsigned long long* hist, status_words* st) {
  __shared__ std::uint32_t local[blocks::radix_max_bins];
  const select_rule r = *rule;
  if (r.skip != 0) return;
  const std::uint32_t bins = blocks::radix_bins(pass);
  for (std::uint32_t b = threadIdx.x; b < bins; b += blockDim.x) local[b] = 0;
  __syncthreads();
  bool bad = false;
  for (std::uint64_t i = thread_index(); i < n; i += thread_stride()) {
    const float x = v(i);
    bad |= !blocks::is_finite(x);
    std::uint32_t key = 0;
    if (r.key_of(x, key) && r.state.matches(key))
      atomicAdd(&local[blocks::radix_state::bin(key, pass)], 1u);
  }
  if (bad && st != nullptr) atomicOr(&st->nonfinite, 1u);
  __syncthreads();
  for (std::uint32_t b = threadIdx.x; b < bins; b += blockDim.x)
    if (local[b] != 0) atomicAdd(&hist[b], static_cast<unsigned long long>(local[b]));
}

__global__ void descend_kernel(select_rule* rule, const unsigned long long* hist, int pass) {
  if (rule->skip == 0) rule->state.descend(hist, pass);
}

//! Per tile: how many participants have a key above T and equal to T.
__global__ void tile_count_kernel(values_in v, std::uint64_t n, const select_rule* rule,
                                  std::uint32_t* tile_above, std::uint32_t* tile_equal) {
  using reduce = cub::BlockReduce<std::uint32_t, tile_threads>;
  __shared__ union {
    typename tile_load::TempStorage load;
    typename reduce::TempStorage reduce;
  } tmp;
  const select_rule r = *rule;
  const std::uint32_t t_key = r.state.threshold();
  float x[tile_items];
  const std::uint64_t begin = load_tile(v, n, tmp.load, x);
  std::uint32_t above = 0, equal = 0;
  for (unsigned j = 0; j < tile_items && begin + j < n; ++j) {
    std::uint32_t key = 0;
    if (!r.key_of(x[j], key)) continue;
    above += key > t_key ? 1u : 0u;
    equal += key == t_key ? 1u : 0u;
  }
  __syncthreads();  // tmp.load is read before tmp.reduce reuses it
  const std::uint32_t total_above = reduce(tmp.reduce).Sum(above);
  __syncthreads();
  const std::uint32_t total_equal = reduce(tmp.reduce).Sum(equal);
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

//! Writes the selected elements of each tile at their ranks.
__global__ void tile_write_kernel(values_in v, std::uint64_t n, const select_rule* rule,
                                  const std::uint64_t* above_before,
                                  const std::uint64_t* equal_before, sparse_out out) {
  using scan = cub::BlockScan<std::uint32_t, tile_threads>;
  __shared__ union {
    typename tile_load::TempStorage load;
    typename scan::TempStorage scan;
  } tmp;
  const select_rule r = *rule;
  const std::uint32_t t_key = r.state.threshold();
  const std::uint64_t need = r.state.need_equal();
  float x[tile_items];
  const std::uint64_t begin = load_tile(v, n, tmp.load, x);
  // Per element: 0 = out, 1 = key above T, 2 = key equal to T.
  std::uint8_t kind[tile_items];
  std::uint32_t equal = 0;
  for (unsigned j = 0; j < tile_items; ++j) {
    std::uint32_t key = 0;
    kind[j] = 0;
    if (begin + j < n && r.key_of(x[j], key)) kind[j] = key > t_key ? 1 : (key == t_key ? 2 : 0);
    equal += kind[j] == 2 ? 1u : 0u;
  }
  __syncthreads();  // tmp.load is read before tmp.scan reuses it
  std::uint32_t equal_rank = 0, total = 0;
  scan(tmp.scan).ExclusiveSum(equal, equal_rank, total);
  __syncthreads();
  const std::uint64_t eq0 = equal_before[blockIdx.x] + equal_rank;
  std::uint32_t chosen = 0;
  std::uint64_t e = eq0;
  for (unsigned j = 0; j < tile_items; ++j) {
    if (kind[j] == 1) ++chosen;
    if (kind[j] == 2) chosen += e++ < need ? 1u : 0u;
  }
  std::uint32_t rank = 0;
  scan(tmp.scan).ExclusiveSum(chosen, rank, total);
  const std::uint64_t eb = equal_before[blockIdx.x];
  std::uint64_t pos = above_before[blockIdx.x] + (eb < need ? eb : need) + rank;
  e = eq0;
  for (unsigned j = 0; j < tile_items; ++j) {
    const bool take = kind[j] == 1 || (kind[j] == 2 && e++ < need);
    if (!take) continue;
    const std::uint64_t i = begin + j;
    if (out.wire == dtype::f32)
      reinterpret_cast<float*>(out.values)[pos] = x[j];
    else
      reinterpret_cast<std::uint16_t*>(out.values)[pos] =
          out.wire == dtype::f16 ? blocks::f32_to_f16(x[j]) : blocks::f32_to_bf16(x[j]);
    if (out.index64)
      reinterpret_cast<std::uint64_t*>(out.index)[pos] = i;
    else
      reinterpret_cast<std::uint32_t*>(out.index)[pos] = static_cast<std::uint32_t>(i);
    ++pos;
  }
}

__global__ void count_kernel(values_in v, std::uint64_t n, float tau, std::uint64_t* count,
                             status_words* st) {
  using reduce = cub::BlockReduce<std::uint64_t, threads>;
  __shared__ typename reduce::TempStorage tmp;
  std::uint64_t c = 0;
  bool bad = false;
  for (std::uint64_t i = thread_index(); i < n; i += thread_stride()) {
    const float x = v(i);
    bad |= !blocks::is_finite(x);
    c += !blocks::is_finite(x) || blocks::fabs_bits(x) >= tau ? 1u : 0u;
  }
  if (bad) atomicOr(&st->nonfinite, 1u);
  const std::uint64_t total = reduce(tmp).Sum(c);
  if (threadIdx.x == 0 && total != 0)
    atomicAdd(reinterpret_cast<unsigned long long*>(count), static_cast<unsigned long long>(total));
}

//! residual = p everywhere (decoded is +0.0 off the sent indices).
__global__ void residual_dense_kernel(const float* p, std::uint64_t n, void* res, dtype rt) {
  for (std::uint64_t i = thread_index(); i < n; i += thread_stride())
    store_value(res, rt, i, blocks::fsub_nan_first(p[i], 0.0f));
}

//! residual = p - decoded at the sent indices.
__global__ void residual_sent_kernel(const float* p, sparse_in s, std::uint64_t k, void* res,
                                     dtype rt) {
  for (std::uint64_t j = thread_index(); j < k; j += thread_stride()) {
    const std::uint64_t i = s.index_at(j);
    store_value(res, rt, i, blocks::fsub_nan_first(p[i], blocks::canonicalize_nan(s.value_at(j))));
  }
}

//! The k values and indices of a sparse payload: k known on the host (`k`), or, under
//! decode_expected, read from the verdict once its header check passed.
struct sparse_frame {
  const std::uint8_t* payload;
  dtype type;
  bool index64;
  std::uint64_t k;
  const frame_verdict* verdict;

  //! False when the verdict forbids reading (a header or index check failed). The code is
  //! read with a relaxed atomic load: check_indices_kernel's threads set it while others
  //! of the same launch read it.
  __device__ __forceinline__ bool open(std::uint64_t& count, sparse_in& s) const {
    count = k;
    if (verdict != nullptr) {
      unsigned code = 0;
      // ld.global takes a global-space address: the generic one converted, as PTX requires.
      asm volatile("ld.relaxed.gpu.global.u32 %0, [%1];"
                   : "=r"(code)
                   : "l"(__cvta_generic_to_global(&verdict->code)));
      if (code != 0) return false;
      count = verdict->count;
    }
    const blocks::sparse_layout l =
        blocks::sparse_layout_of(count, type == dtype::f32 ? 4 : 2, index64);
    s = {payload + l.values_offset, payload + l.index_offset, type, index64};
    return true;
  }
};

//! Sets *bad (to the bad_indices verdict code) when an index is out of range or not
//! above the one before it.
__global__ void check_indices_kernel(sparse_frame f, std::uint64_t n, unsigned* bad) {
  std::uint64_t k = 0;
  sparse_in s{};
  if (!f.open(k, s)) return;
  for (std::uint64_t j = thread_index(); j < k; j += thread_stride()) {
    const std::uint64_t i = s.index_at(j);
    if (i >= n || (j > 0 && i <= s.index_at(j - 1)))
      atomicOr(bad, static_cast<unsigned>(verdict_code::bad_indices));
  }
}

__global__ void scatter_kernel(sparse_frame f, decode_target out) {
  std::uint64_t k = 0;
  sparse_in s{};
  if (!f.open(k, s)) return;
  for (std::uint64_t j = thread_index(); j < k; j += thread_stride())
    out.emit(s.index_at(j), s.value_at(j));
}

}  // namespace

std::size_t select_space::bytes(std::uint64_t n, std::uint64_t extra_floats) {
  const std::uint64_t t = tiles_of(n);
  return 2 * 64 + blocks::radix_max_bins * 8 + 4 * 8 + t * (8 + 8 + 4 + 4) + 64 + extra_floats * 4;
}

select_space select_space::carve(mutable_bytes ws, std::uint64_t n) {
  std::byte* at = after_status(ws).data();
  const std::uint64_t t = tiles_of(n);
  select_space s{};
  s.rule = reinterpret_cast<select_rule*>(at);
  s.sample_rule = reinterpret_cast<select_rule*>(at + 64);
  at += 2 * 64;
  s.hist = reinterpret_cast<unsigned long long*>(at);
  at += blocks::radix_max_bins * 8;
  s.counts = reinterpret_cast<std::uint64_t*>(at);
  at += 4 * 8;
  s.above_before = reinterpret_cast<std::uint64_t*>(at);
  at += t * 8;
  s.equal_before = reinterpret_cast<std::uint64_t*>(at);
  at += t * 8;
  s.tile_above = reinterpret_cast<std::uint32_t*>(at);
  at += t * 4;
  s.tile_equal = reinterpret_cast<std::uint32_t*>(at);
  at += t * 4;
  at += 64 - reinterpret_cast<std::uintptr_t>(at) % 64;
  s.floats = reinterpret_cast<float*>(at);
  return s;
}

status select_rule_init(select_rule* rule, float tau, std::uint64_t m, void* stream) {
  rule_init_kernel<<<1, 1, 0, stream_of(stream)>>>(rule, tau, m);
  GRADCODEC_CUDA_LAUNCHED("rule_init_kernel");
  return {};
}

status select_radix(const select_space& sp, select_rule* rule, values_in v, std::uint64_t n,
                    status_words* st, void* stream) {
  const cudaStream_t s = stream_of(stream);
  for (int pass = 0; pass < blocks::radix_pass_count; ++pass) {
    GRADCODEC_CUDA_TRY(cudaMemsetAsync(sp.hist, 0, blocks::radix_max_bins * 8, s));
    // Exact integer counts: the grid's size changes nothing but the bins' setup cost.
    hist_kernel<<<resident_grid(hist_kernel, hist_threads, n), hist_threads, 0, s>>>(
        v, n, pass, rule, sp.hist, pass == 0 ? st : nullptr);
    GRADCODEC_CUDA_LAUNCHED("hist_kernel");
    descend_kernel<<<1, 1, 0, s>>>(rule, sp.hist, pass);
    GRADCODEC_CUDA_LAUNCHED("descend_kernel");
  }
  return {};
}

status select_compact(const select_space& sp, const select_rule* rule, values_in v, std::uint64_t n,
                      sparse_out out, void* stream) {
  const cudaStream_t s = stream_of(stream);
  const std::uint64_t tiles = tiles_of(n);
  if (tiles == 0) return {};
  tile_count_kernel<<<static_cast<unsigned>(tiles), tile_threads, 0, s>>>(v, n, rule, sp.tile_above,
                                                                          sp.tile_equal);
  GRADCODEC_CUDA_LAUNCHED("tile_count_kernel");
  tile_scan_kernel<<<1, tile_threads, 0, s>>>(tiles, sp.tile_above, sp.tile_equal, sp.above_before,
                                              sp.equal_before);
  GRADCODEC_CUDA_LAUNCHED("tile_scan_kernel");
  tile_write_kernel<<<static_cast<unsigned>(tiles), tile_threads, 0, s>>>(
      v, n, rule, sp.above_before, sp.equal_before, out);
  GRADCODEC_CUDA_LAUNCHED("tile_write_kernel");
  return {};
}

result<std::uint64_t> count_candidates(const select_space& sp, values_in v, std::uint64_t n,
                                       float tau, status_words* st, void* stream) {
  const cudaStream_t s = stream_of(stream);
  GRADCODEC_CUDA_TRY(cudaMemsetAsync(sp.counts, 0, 8, s));
  if (n > 0) {
    count_kernel<<<grid_for(n, threads), threads, 0, s>>>(v, n, tau, sp.counts, st);
    GRADCODEC_CUDA_LAUNCHED("count_kernel");
  }
  std::uint64_t count = 0;
  if (auto st =
          read_to_host(&count, sp.counts, sizeof count, stream, "reading the threshold count");
      !st.ok())
    return st;
  return count;
}

status sparse_residual(const float* p, std::uint64_t n, sparse_in sent, std::uint64_t k,
                       tensor_view residual, void* stream) {
  const cudaStream_t s = stream_of(stream);
  if (n == 0) return {};
  residual_dense_kernel<<<grid_for(n, threads), threads, 0, s>>>(p, n, residual.data,
                                                                 residual.type);
  GRADCODEC_CUDA_LAUNCHED("residual_dense_kernel");
  if (k == 0) return {};
  residual_sent_kernel<<<grid_for(k, threads), threads, 0, s>>>(p, sent, k, residual.data,
                                                                residual.type);
  GRADCODEC_CUDA_LAUNCHED("residual_sent_kernel");
  return {};
}

result<sparse_encode> sparse_begin(const detail::encode_call& c, tensor_view residual) {
  if (auto st = check_frame_alignment(c.payload); !st.ok()) return st;
  if (auto st = begin_frame(c.workspace, c.stream); !st.ok()) return st;
  sparse_encode e{select_space::carve(c.workspace, c.in.n), {c.in.data, c.in.type}, nullptr};
  if (residual.data != nullptr) {
    if (auto st = feedback_sum(c.in, residual, e.sp.floats, c.stream); !st.ok()) return st;
    e.v = {e.sp.floats, dtype::f32};
    e.p = e.sp.floats;
  }
  return e;
}

status sparse_end(const detail::encode_call& c, const sparse_encode& e, std::uint64_t m,
                  tensor_view residual) {
  const std::uint64_t n = c.in.n;
  const bool index64 = (c.hdr.flags & flag_index64) != 0;
  const blocks::sparse_layout l = blocks::sparse_layout_of(m, dtype_size(c.wire), index64);
  if (auto st = check_sparse_capacity(c, m); !st.ok()) return st;
  if (m > 0)
    if (auto st = select_compact(e.sp, e.sp.rule, e.v, n,
                                 sparse_out_of(c.payload, l, c.wire, index64), c.stream);
        !st.ok())
      return st;
  if (auto st = zero_bytes(c.payload, l.values_bytes, l.index_offset, c.stream); !st.ok())
    return st;
  if (auto st = zero_bytes(c.payload, l.index_offset + l.index_bytes, l.total, c.stream); !st.ok())
    return st;
  if (e.p != nullptr)
    if (auto st = sparse_residual(e.p, n, sparse_in_of(c.payload, l, c.wire, index64), m, residual,
                                  c.stream);
        !st.ok())
      return st;
  c.hdr.count = m;
  c.hdr.payload_bytes = l.total;
  return finish_frame(c.hdr, c.payload, c.workspace, c.stream);
}

std::size_t sparse_workspace(std::uint64_t n, operation op, std::uint64_t extra_floats) {
  if (op != operation::encode && op != operation::encode_with_feedback) return status_bytes;
  return status_bytes +
         select_space::bytes(n, extra_floats + (op == operation::encode_with_feedback ? n : 0));
}

status sparse_decode(const detail::decode_call& c) {
  if (auto st = check_frame_alignment(c.payload); !st.ok()) return st;
  const std::uint64_t n = c.hdr.n;
  const bool index64 = (c.hdr.flags & flag_index64) != 0;
  const auto* payload = reinterpret_cast<const std::uint8_t*>(c.payload);
  const cudaStream_t s = stream_of(c.stream);
  const decode_target out = target_of(c);
  // Host header: k is known, and the index verdict is awaited here. Under decode_expected
  // k comes from the verdict, the grids are sized for the most elements the frame's length
  // allows, and the verdict gates the writes.
  sparse_frame f{payload, c.hdr.type, index64, c.hdr.count, c.verdict};
  std::uint64_t k_bound = f.k;
  if (c.verdict != nullptr) {
    const std::uint64_t payload_bytes =
        c.frame_bytes > header_bytes ? c.frame_bytes - header_bytes : 0;
    k_bound =
        std::min<std::uint64_t>(n, payload_bytes / (dtype_size(c.hdr.type) + (index64 ? 8u : 4u)));
  } else if (n > 0 && f.k == 0 && c.hdr.codec != codec_id::threshold) {
    return {status_code::corrupt_frame, "sparse frame with no elements"};
  }
  if (k_bound > 0) {
    unsigned* bad = c.verdict != nullptr ? &c.verdict->code : &status_of(c.workspace)->bad_index;
    if (c.verdict == nullptr)
      GRADCODEC_CUDA_TRY(cudaMemsetAsync(c.workspace.data(), 0, sizeof(status_words), s));
    check_indices_kernel<<<grid_for(k_bound, threads), threads, 0, s>>>(f, n, bad);
    GRADCODEC_CUDA_LAUNCHED("check_indices_kernel");
    if (c.verdict == nullptr) {
      status_words verdict{};
      if (auto st = read_to_host(&verdict, c.workspace.data(), sizeof verdict, c.stream,
                                 "reading the index verdict");
          !st.ok())
        return st;
      if (verdict.bad_index != 0)
        return {status_code::corrupt_frame,
                "sparse indices out of range or not strictly ascending"};
    }
  }
  if (!c.accumulate)
    if (auto st = zero_output(n, out, c.stream); !st.ok()) return st;
  if (k_bound > 0) {
    scatter_kernel<<<grid_for(k_bound, threads), threads, 0, s>>>(f, out);
    GRADCODEC_CUDA_LAUNCHED("scatter_kernel");
  }
  return {};
}

}  // namespace gradcodec::cuda
