// SPDX-License-Identifier: Apache-2.0
//! @file
//! Stratified random-k on the GPU (docs/codecs.md "randomk"): one thread per stratum
//! (blocks/randomk.hpp), so encode reads only the k sent elements. Error feedback is the
//! generic composition's e = p - decoded, which is p = g + e everywhere but at the sent
//! index: the sent value and that index's residual per stratum (kept in the workspace),
//! then one coalesced pass e = p over every element, then the k sent residuals written
//! back, so a large stratum (small k) never falls to one thread. Decode likewise: zeros
//! in one pass, then the k values.
#include "codecs.hpp"
#include "common.cuh"
#include "gradcodec/blocks/layout.hpp"
#include "gradcodec/blocks/randomk.hpp"

namespace gradcodec::cuda {

namespace {

using policy::threads;

__device__ __forceinline__ void put_wire(std::uint8_t* values, dtype wire, std::uint64_t j,
                                         float x) {
  if (wire == dtype::f32)
    reinterpret_cast<float*>(values)[j] = x;
  else
    reinterpret_cast<std::uint16_t*>(values)[j] =
        wire == dtype::f16 ? blocks::f32_to_f16(x) : blocks::f32_to_bf16(x);
}
__device__ __forceinline__ float get_wire(const std::uint8_t* values, dtype wire, std::uint64_t j) {
  if (wire == dtype::f32) return reinterpret_cast<const float*>(values)[j];
  const std::uint16_t h = reinterpret_cast<const std::uint16_t*>(values)[j];
  return wire == dtype::f16 ? blocks::f16_to_f32(h) : blocks::bf16_to_f32(h);
}

struct randomk_shape {
  std::uint64_t n, k;
  dtype wire;
  bool unbiased;
  blocks::counter_rng rng;
  blocks::randomk_layout layout;
};

//! The k sent values; with a residual also each stratum's residual at its sent index,
//! p - decoded, into sent_residual[j] (the residual itself is left for the passes after).
__global__ void randomk_encode_kernel(randomk_shape f, const void* in, dtype in_type,
                                      const void* residual, dtype res_type, std::uint8_t* payload,
                                      float* sent_residual, status_words* st) {
  std::uint8_t* values = payload + f.layout.values_offset;
  bool bad = false;
  for (std::uint64_t j = thread_index(); j < f.k; j += thread_stride()) {
    const blocks::randomk_stratum s = blocks::randomk_stratum_of(f.rng, j, f.n, f.k);
    float v = load_value(in, in_type, s.index);
    if (residual != nullptr) v = blocks::fadd_nan_first(v, load_value(residual, res_type, s.index));
    bad |= !blocks::is_finite(v);
    // x86 keeps a NaN's payload through the product, a GPU would not.
    const float x = f.unbiased ? blocks::fmul_nan_first(v, static_cast<float>(s.size)) : v;
    put_wire(values, f.wire, j, x);
    if (residual == nullptr) continue;
    const float sent = blocks::canonicalize_nan(get_wire(values, f.wire, j));
    sent_residual[j] = blocks::fsub_nan_first(v, sent);
  }
  if (bad) atomicOr(&st->nonfinite, 1u);
  if (thread_index() == 0) blocks::write_rng_key(f.rng, payload + f.layout.key_offset);
}

//! residual[i] = p - 0 with p = in + residual: the residual of every element not sent.
__global__ void unsent_residual_kernel(std::uint64_t n, const void* in, dtype in_type,
                                       void* residual, dtype res_type) {
  for (std::uint64_t i = thread_index(); i < n; i += thread_stride()) {
    const float p =
        blocks::fadd_nan_first(load_value(in, in_type, i), load_value(residual, res_type, i));
    store_value(residual, res_type, i, blocks::fsub_nan_first(p, 0.0f));
  }
}

//! The sent elements' residuals over the pass above.
__global__ void sent_residual_kernel(randomk_shape f, const float* sent_residual, void* residual,
                                     dtype res_type) {
  for (std::uint64_t j = thread_index(); j < f.k; j += thread_stride())
    store_value(residual, res_type, blocks::randomk_stratum_of(f.rng, j, f.n, f.k).index,
                sent_residual[j]);
}

//! Each stratum's value at its index (accumulated, or over the zeros written before).
__global__ void randomk_decode_kernel(std::uint64_t n, std::uint64_t k, dtype wire,
                                      const std::uint8_t* payload, blocks::randomk_layout layout,
                                      decode_target out) {
  if (out.closed()) return;
  const blocks::counter_rng rng = blocks::read_rng_key(payload + layout.key_offset);
  const std::uint8_t* values = payload + layout.values_offset;
  for (std::uint64_t j = thread_index(); j < k; j += thread_stride())
    out.emit(blocks::randomk_stratum_of(rng, j, n, k).index, get_wire(values, wire, j));
}

status encode_impl(const detail::encode_call& c, tensor_view residual) {
  if (auto st = check_frame_alignment(c.payload); !st.ok()) return st;
  randomk_shape f{};
  f.n = c.in.n;
  f.k = sparse_count(c.spec, f.n);
  f.wire = c.wire;
  f.unbiased = c.spec.unbiased;
  f.rng = blocks::counter_rng::make(c.ctx.seed, c.ctx.step, c.ctx.tensor_id);
  f.layout = blocks::randomk_layout_of(f.k, dtype_size(c.wire));
  if (f.layout.total > c.capacity)
    return {status_code::output_too_small, "output buffer too small for the payload"};
  if (auto st = begin_frame(c.workspace, c.stream); !st.ok()) return st;
  auto* payload = reinterpret_cast<std::uint8_t*>(c.payload);
  const cudaStream_t s = stream_of(c.stream);
  auto* sent_residual = reinterpret_cast<float*>(after_status(c.workspace).data());
  randomk_encode_kernel<<<grid_for(f.k == 0 ? 1 : f.k, threads), threads, 0, s>>>(
      f, c.in.data, c.in.type, residual.data, residual.type, payload, sent_residual,
      status_of(c.workspace));
  GRADCODEC_CUDA_LAUNCHED("randomk_encode_kernel");
  if (residual.data != nullptr && f.n > 0) {
    unsent_residual_kernel<<<grid_for(f.n, threads), threads, 0, s>>>(f.n, c.in.data, c.in.type,
                                                                      residual.data, residual.type);
    GRADCODEC_CUDA_LAUNCHED("unsent_residual_kernel");
    if (f.k > 0) {
      sent_residual_kernel<<<grid_for(f.k, threads), threads, 0, s>>>(f, sent_residual,
                                                                      residual.data, residual.type);
      GRADCODEC_CUDA_LAUNCHED("sent_residual_kernel");
    }
  }
  const std::uint64_t used = f.layout.values_offset + f.layout.values_bytes;
  if (auto st = zero_bytes(c.payload, used, f.layout.total, c.stream); !st.ok()) return st;
  c.hdr.count = f.k;
  if (f.unbiased) c.hdr.mode |= mode_unbiased;
  c.hdr.payload_bytes = f.layout.total;
  return finish_frame(c.hdr, c.payload, c.workspace, c.stream);
}

}  // namespace

std::size_t randomk_workspace(const codec_spec& spec, const_tensor_view shape, operation op) {
  // Error feedback keeps each stratum's sent residual (f32) until the dense pass is done.
  if (op != operation::encode_with_feedback) return status_only(op);
  return status_bytes + sparse_count(spec, shape.n) * 4;
}

status randomk_encode(const detail::encode_call& c) { return encode_impl(c, {}); }

status randomk_encode_feedback(const detail::feedback_call& c) {
  return encode_impl(c.enc, c.residual);
}

status randomk_decode(const detail::decode_call& c) {
  if (auto st = check_frame_alignment(c.payload); !st.ok()) return st;
  const std::uint64_t n = c.hdr.n, k = c.hdr.count;
  if (n > 0 && k == 0) return {status_code::corrupt_frame, "randomk frame with no elements"};
  if (k == 0) return {};
  const decode_target out = target_of(c);
  if (!c.accumulate)
    if (auto st = zero_output(n, out, c.stream); !st.ok()) return st;
  randomk_decode_kernel<<<grid_for(k, threads), threads, 0, stream_of(c.stream)>>>(
      n, k, c.hdr.type, reinterpret_cast<const std::uint8_t*>(c.payload),
      blocks::randomk_layout_of(k, dtype_size(c.hdr.type)), out);
  GRADCODEC_CUDA_LAUNCHED("randomk_decode_kernel");
  return {};
}

}  // namespace gradcodec::cuda
