// SPDX-License-Identifier: Apache-2.0
//! @file
//! DGC's sampled-threshold top-k on the GPU (docs/codecs.md "dgc"), without a host wait:
//! the strided sample's keys are gathered into the workspace and the ks-th largest found
//! with the radix select of select.cuh; one pass counts the candidates of all four
//! thresholds t_r = t_0 / 2^r; a one-thread kernel picks the first round with at least k
//! candidates (the rule becomes "top k of those candidates") or the fallback (binary keys:
//! every candidate plus the lowest-index others); then the usual select and compaction.
#include <cub/block/block_reduce.cuh>

#include <cmath>

#include "codecs.hpp"
#include "gradcodec/blocks/philox.hpp"
#include "select.cuh"

namespace gradcodec::cuda {

namespace {

using policy::threads;
constexpr int rounds = 4;

std::uint64_t sample_size(double sample, std::uint64_t n) {
  const double s = std::ceil(sample * static_cast<double>(n));
  const auto si = static_cast<std::uint64_t>(s);
  return si < 1 ? 1 : (si > n ? n : si);
}

//! sample[j] = |v[start + j * stride]|, or +0.0 for a non-finite value (it must not raise
//! the threshold: it is a candidate at any threshold).
__global__ void gather_sample_kernel(values_in v, std::uint64_t start, std::uint64_t stride,
                                     std::uint64_t s, float* sample) {
  for (std::uint64_t j = thread_index(); j < s; j += thread_stride()) {
    const float x = v(start + j * stride);
    sample[j] = blocks::is_finite(x) ? blocks::fabs_bits(x) : 0.0f;
  }
}

__device__ __forceinline__ float round_threshold(float t0, int r) {
  float t = t0;
  for (int i = 0; i < r; ++i) t = blocks::fmul(t, 0.5f);
  return t;
}

//! counts[r] = |C_r| for the four rounds; notes non-finite values.
__global__ void round_count_kernel(values_in v, std::uint64_t n, const select_rule* sample_rule,
                                   std::uint64_t* counts, status_words* st) {
  using reduce = cub::BlockReduce<std::uint64_t, threads>;
  __shared__ typename reduce::TempStorage tmp;
  const float t0 = blocks::bits_float(sample_rule->state.threshold());
  float t[rounds];
  for (int r = 0; r < rounds; ++r) t[r] = round_threshold(t0, r);
  std::uint64_t c[rounds] = {0, 0, 0, 0};
  bool bad = false;
  for (std::uint64_t i = thread_index(); i < n; i += thread_stride()) {
    const float x = v(i);
    const bool finite = blocks::is_finite(x);
    bad |= !finite;
    const float a = blocks::fabs_bits(x);
    for (int r = 0; r < rounds; ++r) c[r] += !finite || a >= t[r] ? 1u : 0u;
  }
  if (bad) atomicOr(&st->nonfinite, 1u);
  for (int r = 0; r < rounds; ++r) {
    const std::uint64_t total = reduce(tmp).Sum(c[r]);
    __syncthreads();
    if (threadIdx.x == 0 && total != 0)
      atomicAdd(reinterpret_cast<unsigned long long*>(counts + r),
                static_cast<unsigned long long>(total));
  }
}

//! The first round with k candidates selects its top k; else the fallback.
__global__ void choose_kernel(const select_rule* sample_rule, const std::uint64_t* counts,
                              std::uint64_t k, select_rule* rule) {
  const float t0 = blocks::bits_float(sample_rule->state.threshold());
  *rule = select_rule{};
  for (int r = 0; r < rounds; ++r)
    if (counts[r] >= k) {
      rule->tau = round_threshold(t0, r);
      rule->state.remaining = k;
      return;
    }
  rule->tau = round_threshold(t0, rounds - 1);
  rule->binary = 1;
  rule->skip = 1;  // T = 0 (non-candidates) with need = k - |C_3|: the rule is final
  rule->state.remaining = k - counts[rounds - 1];
}

status encode_impl(const detail::encode_call& c, tensor_view residual) {
  const std::uint64_t n = c.in.n, k = sparse_count(c.spec, n);
  if (auto st = check_sparse_capacity(c, k); !st.ok()) return st;
  auto e = sparse_begin(c, residual);
  if (!e) return e.error();
  c.hdr.param = static_cast<float>(c.spec.sample);
  if (n == 0) return sparse_end(c, e.value(), 0, residual);

  const cudaStream_t s = stream_of(c.stream);
  const select_space& sp = e.value().sp;
  const values_in v = e.value().v;
  float* sample = sp.floats + (e.value().p != nullptr ? n : 0);  // after p
  // The sample and its ks-th largest key (docs/codecs.md "dgc", steps 1-4).
  __extension__ typedef unsigned __int128 u128;
  const std::uint64_t ss = sample_size(c.spec.sample, n);
  const std::uint64_t stride = n / ss;
  const auto rng = blocks::counter_rng::make(c.ctx.seed, c.ctx.step, c.ctx.tensor_id);
  const std::uint64_t start = blocks::scale_u32(rng.at(blocks::rng_stream::sampling, 0), stride);
  const auto ks_exact = static_cast<std::uint64_t>((static_cast<u128>(k) * ss + (n - 1)) / n);
  const std::uint64_t ks = ks_exact < 1 ? 1 : ks_exact;
  gather_sample_kernel<<<grid_for(ss, threads), threads, 0, s>>>(v, start, stride, ss, sample);
  GRADCODEC_CUDA_LAUNCHED("gather_sample_kernel");
  const values_in sv{sample, dtype::f32};
  if (auto st = select_rule_init(sp.sample_rule, 0.0f, ks, c.stream); !st.ok()) return st;
  if (auto st = select_radix(sp, sp.sample_rule, sv, ss, nullptr, c.stream); !st.ok()) return st;
  // The rounds (step 5) and the fallback (step 6), decided on the device.
  GRADCODEC_CUDA_TRY(cudaMemsetAsync(sp.counts, 0, rounds * 8, s));
  round_count_kernel<<<grid_for(n, threads), threads, 0, s>>>(v, n, sp.sample_rule, sp.counts,
                                                              status_of(c.workspace));
  GRADCODEC_CUDA_LAUNCHED("round_count_kernel");
  choose_kernel<<<1, 1, 0, s>>>(sp.sample_rule, sp.counts, k, sp.rule);
  GRADCODEC_CUDA_LAUNCHED("choose_kernel");
  if (auto st = select_radix(sp, sp.rule, v, n, nullptr, c.stream); !st.ok()) return st;
  return sparse_end(c, e.value(), k, residual);
}

}  // namespace

std::size_t dgc_workspace(const codec_spec& spec, const_tensor_view shape, operation op) {
  return sparse_workspace(shape.n, op, shape.n > 0 ? sample_size(spec.sample, shape.n) : 0);
}

status dgc_encode(const detail::encode_call& c) { return encode_impl(c, {}); }

status dgc_encode_feedback(const detail::feedback_call& c) {
  return encode_impl(c.enc, c.residual);
}

status dgc_decode(const detail::decode_call& c) { return sparse_decode(c); }

}  // namespace gradcodec::cuda
