// SPDX-License-Identifier: Apache-2.0
//! @file
//! The device side of a frame: status words, the header kernel, padding, CUDA errors.
#include <string>

#include "common.cuh"
#include "gradcodec/blocks/expected_header.hpp"

namespace gradcodec::cuda {

status cuda_error(cudaError_t e, const char* what) {
  return {status_code::device_error,
          std::string("CUDA: ").append(what).append(": ").append(cudaGetErrorString(e))};
}

namespace {

__global__ void finish_header_kernel(frame_header h, const status_words* st, std::uint8_t* dst) {
  if (st->nonfinite != 0) h.flags = static_cast<std::uint8_t>(h.flags | flag_nonfinite);
  blocks::serialize_header(h, dst);
}

__global__ void check_header_kernel(frame_header expected, const std::uint8_t* frame,
                                    std::uint64_t frame_bytes, frame_verdict* verdict) {
  *verdict = blocks::check_expected_header(expected, frame, frame_bytes);
}

__global__ void zeros_kernel(std::uint64_t n, decode_target out) {
  if (out.closed()) return;
  for (std::uint64_t i = thread_index(); i < n; i += thread_stride()) out.emit(i, 0.0f);
}

__global__ void feedback_sum_kernel(const void* g, dtype gt, const void* e, dtype et,
                                    std::uint64_t n, float* p) {
  for (std::uint64_t i = thread_index(); i < n; i += thread_stride())
    p[i] = blocks::fadd_nan_first(load_value(g, gt, i), load_value(e, et, i));
}

}  // namespace

status feedback_sum(const_tensor_view g, const_tensor_view e, float* p, void* stream) {
  if (g.n == 0) return {};
  constexpr unsigned threads = policy::threads;
  feedback_sum_kernel<<<grid_for(g.n, threads), threads, 0, stream_of(stream)>>>(
      g.data, g.type, e.data, e.type, g.n, p);
  GRADCODEC_CUDA_LAUNCHED("feedback_sum_kernel");
  return {};
}

status begin_frame(mutable_bytes ws, void* stream) {
  GRADCODEC_CUDA_TRY(cudaMemsetAsync(ws.data(), 0, sizeof(status_words), stream_of(stream)));
  return {};
}

status finish_frame(const frame_header& h, std::byte* payload, mutable_bytes ws, void* stream) {
  finish_header_kernel<<<1, 1, 0, stream_of(stream)>>>(
      h, status_of(ws), reinterpret_cast<std::uint8_t*>(payload - header_bytes));
  GRADCODEC_CUDA_LAUNCHED("finish_header_kernel");
  return {};
}

status check_header(const frame_header& expected, const std::byte* frame, std::uint64_t frame_bytes,
                    frame_verdict* verdict, void* stream) {
  check_header_kernel<<<1, 1, 0, stream_of(stream)>>>(
      expected, reinterpret_cast<const std::uint8_t*>(frame), frame_bytes, verdict);
  GRADCODEC_CUDA_LAUNCHED("check_header_kernel");
  return {};
}

status zero_output(std::uint64_t n, const decode_target& out, void* stream) {
  if (n == 0) return {};
  constexpr unsigned threads = policy::threads;
  zeros_kernel<<<grid_for(n, threads), threads, 0, stream_of(stream)>>>(n, out);
  GRADCODEC_CUDA_LAUNCHED("zeros_kernel");
  return {};
}

status check_frame_alignment(const std::byte* payload) {
  if (reinterpret_cast<std::uintptr_t>(payload) % 16 != 0)
    return {status_code::invalid_argument, "CUDA backend: frames must start 16-byte aligned"};
  return {};
}

status zero_bytes(std::byte* payload, std::uint64_t from, std::uint64_t to, void* stream) {
  if (to > from)
    GRADCODEC_CUDA_TRY(cudaMemsetAsync(payload + from, 0, to - from, stream_of(stream)));
  return {};
}

}  // namespace gradcodec::cuda
