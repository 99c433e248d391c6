// SPDX-License-Identifier: Apache-2.0
//! @file
//! Stratified random-k on the GPU (docs/codecs.md "randomk"): one thread per stratum
//! (blocks/randomk.hpp), so encode reads only the k sent elements. Error feedback is one
//! pass over every stratum: p = g + e, the sent value from p at the stratum's index, and
//! e = p - decoded, which is p everywhere but at the index (the generic composition).
#include "codecs.hpp"
#include "common.cuh"
#include "gradcodec/blocks/layout.hpp"
#include "gradcodec/blocks/randomk.hpp"

namespace gradcodec::cuda {

namespace {

constexpr unsigned threads = 256;

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

//! With a residual: p = in + residual over the whole stratum, residual = p - decoded.
__global__ void randomk_encode_kernel(randomk_shape f, const void* in, dtype in_type,
                                      void* residual, dtype res_type, std::uint8_t* payload,
                                      status_words* st) {
  std::uint8_t* values = payload + f.layout.values_offset;
  bool bad = false;
  for (std::uint64_t j = thread_index(); j < f.k; j += thread_stride()) {
    const blocks::randomk_stratum s = blocks::randomk_stratum_of(f.rng, j, f.n, f.k);
    float v = load_value(in, in_type, s.index);
    if (residual != nullptr) v = blocks::fadd_nan_first(v, load_value(residual, res_type, s.index));
    bad |= !blocks::is_finite(v);
    const float x = f.unbiased ? blocks::fmul(v, static_cast<float>(s.size)) : v;
    put_wire(values, f.wire, j, x);
    if (residual == nullptr) continue;
    const float sent = blocks::canonicalize_nan(get_wire(values, f.wire, j));
    for (std::uint64_t i = s.lo; i < s.lo + s.size; ++i) {
      const float p = i == s.index ? v
                                   : blocks::fadd_nan_first(load_value(in, in_type, i),
                                                            load_value(residual, res_type, i));
      store_value(residual, res_type, i, blocks::fsub_nan_first(p, i == s.index ? sent : 0.0f));
    }
  }
  if (bad) atomicOr(&st->nonfinite, 1u);
  if (thread_index() == 0) blocks::randomk_put_key(f.rng, payload + f.layout.key_offset);
}

__global__ void randomk_decode_kernel(std::uint64_t n, std::uint64_t k, dtype wire,
                                      const std::uint8_t* payload, blocks::randomk_layout layout,
                                      decode_target out) {
  if (out.closed()) return;
  const blocks::counter_rng rng = blocks::randomk_get_key(payload + layout.key_offset);
  const std::uint8_t* values = payload + layout.values_offset;
  for (std::uint64_t j = thread_index(); j < k; j += thread_stride()) {
    const blocks::randomk_stratum s = blocks::randomk_stratum_of(rng, j, n, k);
    const float x = get_wire(values, wire, j);
    if (out.accumulate) {
      out.emit(s.index, x);
      continue;
    }
    for (std::uint64_t i = s.lo; i < s.lo + s.size; ++i) out.emit(i, i == s.index ? x : 0.0f);
  }
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
  randomk_encode_kernel<<<grid_for(f.k == 0 ? 1 : f.k, threads), threads, 0, stream_of(c.stream)>>>(
      f, c.in.data, c.in.type, residual.data, residual.type, payload, status_of(c.workspace));
  GRADCODEC_CUDA_LAUNCHED("randomk_encode_kernel");
  const std::uint64_t used = f.layout.values_offset + f.layout.values_bytes;
  if (auto st = zero_bytes(c.payload, used, f.layout.total, c.stream); !st.ok()) return st;
  c.hdr.count = f.k;
  if (f.unbiased) c.hdr.mode |= mode_unbiased;
  c.hdr.payload_bytes = f.layout.total;
  return finish_frame(c.hdr, c.payload, c.workspace, c.stream);
}

}  // namespace

std::size_t randomk_workspace(const codec_spec&, const_tensor_view, operation) {
  return status_bytes;
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
  randomk_decode_kernel<<<grid_for(k, threads), threads, 0, stream_of(c.stream)>>>(
      n, k, c.hdr.type, reinterpret_cast<const std::uint8_t*>(c.payload),
      blocks::randomk_layout_of(k, dtype_size(c.hdr.type)), target_of(c));
  GRADCODEC_CUDA_LAUNCHED("randomk_decode_kernel");
  return {};
}

}  // namespace gradcodec::cuda
