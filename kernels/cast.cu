// SPDX-License-Identifier: Apache-2.0
//! @file
//! fp16 / bf16 casts on the GPU (docs/codecs.md "fp16, bf16"): one element per thread
//! step, the conversions of blocks/float16.hpp (bit-exact with the reference), error
//! feedback fused into the same pass.
#include "codecs.hpp"
#include "common.cuh"
#include "gradcodec/blocks/layout.hpp"

namespace gradcodec::cuda {

namespace {

using policy::threads;

__device__ __forceinline__ std::uint16_t to_half(bool f16, float x) {
  return f16 ? blocks::f32_to_f16(x) : blocks::f32_to_bf16(x);
}
__device__ __forceinline__ float from_half(bool f16, std::uint16_t h) {
  return f16 ? blocks::f16_to_f32(h) : blocks::bf16_to_f32(h);
}

//! Encodes v = in[i] (or, with a residual, p = g[i] + e[i], then e[i] = p - decoded).
__global__ void cast_encode_kernel(const void* in, dtype in_type, void* residual, dtype res_type,
                                   std::uint64_t n, bool f16, std::uint16_t* out,
                                   status_words* st) {
  bool bad = false;
  for (std::uint64_t i = thread_index(); i < n; i += thread_stride()) {
    float v = load_value(in, in_type, i);
    if (residual != nullptr) v = blocks::fadd_nan_first(v, load_value(residual, res_type, i));
    bad |= !blocks::is_finite(v);
    const std::uint16_t h = to_half(f16, v);
    out[i] = h;
    if (residual != nullptr)
      store_value(residual, res_type, i,
                  blocks::fsub_nan_first(v, blocks::canonicalize_nan(from_half(f16, h))));
  }
  if (bad) atomicOr(&st->nonfinite, 1u);
}

__global__ void cast_decode_kernel(const std::uint16_t* in, std::uint64_t n, bool f16,
                                   decode_target out) {
  if (out.closed()) return;
  for (std::uint64_t i = thread_index(); i < n; i += thread_stride())
    out.emit(i, from_half(f16, in[i]));
}

status encode_impl(const detail::encode_call& c, tensor_view residual) {
  if (auto st = check_frame_alignment(c.payload); !st.ok()) return st;
  const std::uint64_t n = c.in.n;
  const std::uint64_t bytes = blocks::cast_payload_bytes(n);
  if (bytes > c.capacity)
    return {status_code::output_too_small, "output buffer too small for the payload"};
  if (auto st = begin_frame(c.workspace, c.stream); !st.ok()) return st;
  if (n > 0) {
    cast_encode_kernel<<<grid_for(n, threads), threads, 0, stream_of(c.stream)>>>(
        c.in.data, c.in.type, residual.data, residual.type, n, c.spec.id == codec_id::fp16,
        reinterpret_cast<std::uint16_t*>(c.payload), status_of(c.workspace));
    GRADCODEC_CUDA_LAUNCHED("cast_encode_kernel");
  }
  if (auto st = zero_bytes(c.payload, 2 * n, bytes, c.stream); !st.ok()) return st;
  c.hdr.payload_bytes = bytes;
  return finish_frame(c.hdr, c.payload, c.workspace, c.stream);
}

}  // namespace

std::size_t cast_workspace(const codec_spec&, const_tensor_view, operation op) {
  return status_only(op);
}

status cast_encode(const detail::encode_call& c) { return encode_impl(c, {}); }

status cast_encode_feedback(const detail::feedback_call& c) {
  return encode_impl(c.enc, c.residual);
}

status cast_decode(const detail::decode_call& c) {
  if (auto st = check_frame_alignment(c.payload); !st.ok()) return st;
  if (c.hdr.n == 0) return {};
  cast_decode_kernel<<<grid_for(c.hdr.n, threads), threads, 0, stream_of(c.stream)>>>(
      reinterpret_cast<const std::uint16_t*>(c.payload), c.hdr.n, c.hdr.codec == codec_id::fp16,
      target_of(c));
  GRADCODEC_CUDA_LAUNCHED("cast_decode_kernel");
  return {};
}

}  // namespace gradcodec::cuda
