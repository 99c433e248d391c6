// SPDX-License-Identifier: Apache-2.0
//! @file
//! What every CUDA codec shares: status from CUDA errors, element access in any dtype,
//! the decoded-value store, launch shapes, the workspace's status words, and the kernel
//! that finishes a frame header on the device.
//!
//! Contract with the front end (contract/backend.hpp): buffers are device memory; a CUDA codec
//! writes the whole frame itself, header included (at payload - header_bytes), because
//! the non-finite flag and with it the header checksum are known only on the device.
//! Everything is stream-ordered on the caller's stream: no allocation, no host
//! synchronization, no pageable copies, so an encode can be captured in a CUDA graph.
#pragma once

#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>

#include "contract/backend.hpp"
#include "contract/scalar_values.hpp"
#include "gradcodec/blocks/float16.hpp"
#include "gradcodec/blocks/fmath.hpp"
#include "gradcodec/blocks/header.hpp"
#include "launch_policy.cuh"

namespace gradcodec::cuda {

inline cudaStream_t stream_of(void* s) { return static_cast<cudaStream_t>(s); }

//! Per-device caches (events, occupancy) cover device ordinals below this.
inline constexpr int max_devices = 64;

//! A failed CUDA call or launch as a status naming it.
status cuda_error(cudaError_t e, const char* what);

//! The most bytes read_to_host copies.
inline constexpr std::size_t host_read_max = 64;
//! Copies `bytes` (at most host_read_max) of device memory to `host` after the work queued
//! on `stream` and waits for them (host_read.cu); `what` names the wait in an error.
status read_to_host(void* host, const void* device, std::size_t bytes, void* stream,
                    const char* what);

#define GRADCODEC_CUDA_TRY(call)                                                                \
  do {                                                                                          \
    const cudaError_t gradcodec_e_ = (call);                                                    \
    if (gradcodec_e_ != cudaSuccess) return ::gradcodec::cuda::cuda_error(gradcodec_e_, #call); \
  } while (0)

//! Launch errors (bad configuration, no kernel image for this GPU) show up here, named by
//! the kernel. cudaGetLastError clears a non-sticky error once reported, so one failed
//! launch does not fail every later call on this thread.
#define GRADCODEC_CUDA_LAUNCHED(what)                                                          \
  do {                                                                                         \
    const cudaError_t gradcodec_e_ = cudaGetLastError();                                       \
    if (gradcodec_e_ != cudaSuccess) return ::gradcodec::cuda::cuda_error(gradcodec_e_, what); \
  } while (0)

// Element access in any dtype: the library's one definition (contract/scalar_values.hpp).
using detail::load_value;
using detail::store_value;

//! Values v(i) of a tensor in any dtype, as kernels read their input.
struct values_in {
  const void* data;
  dtype type;
  __device__ __forceinline__ float operator()(std::uint64_t i) const {
    return load_value(data, type, i);
  }
};

//! Where decoded values go: out[i] = v, or acc[i] = fma(alpha, v, acc[i]), NaN canonical;
//! or, for error feedback, residual[i] = p[i] - v (the generic composition's residual).
//! A decode_expected call gates every write on its verdict: a kernel returns at once
//! when `gate` (the verdict's code, set by the kernels before it) is not ok.
struct decode_target {
  void* data;
  dtype type;
  float alpha;
  bool accumulate;
  const float* minuend;  //!< p when this is a residual update, else null
  const std::uint32_t* gate = nullptr;
  __device__ __forceinline__ bool closed() const { return gate != nullptr && *gate != 0; }
  __device__ __forceinline__ void emit(std::uint64_t i, float v) const {
    v = blocks::canonicalize_nan(v);
    if (minuend != nullptr) {
      store_value(data, type, i, blocks::fsub_nan_first(minuend[i], v));
      return;
    }
    if (accumulate) v = blocks::canonicalize_nan(blocks::ffma(alpha, v, load_value(data, type, i)));
    store_value(data, type, i, v);
  }
};

inline decode_target target_of(const detail::decode_call& c) {
  return {c.out.data,   c.out.type, c.alpha,
          c.accumulate, nullptr,    c.verdict != nullptr ? &c.verdict->code : nullptr};
}
inline decode_target residual_target(tensor_view residual, const float* p) {
  return {residual.data, residual.type, 1.0f, false, p};
}

//! Grid of `threads`-thread blocks for grid-stride loops over `work` items.
inline unsigned grid_for(std::uint64_t work, unsigned threads) {
  const std::uint64_t blocks_needed = (work + threads - 1) / threads;
  constexpr std::uint64_t cap = 65535u * 4u;  // enough to fill any current GPU
  return static_cast<unsigned>(blocks_needed == 0 ? 1
                                                  : (blocks_needed < cap ? blocks_needed : cap));
}

//! grid_for, capped at the blocks the current device runs at once: for grid-stride kernels
//! whose blocks pay a fixed cost of their own (clearing and flushing shared-memory bins),
//! so that cost is paid once per resident block, not once per 256 elements. The device's
//! share is asked once per device and kernel.
template <class Kernel>
unsigned resident_grid(Kernel kernel, unsigned threads, std::uint64_t work) {
  static std::atomic<unsigned> resident[max_devices] = {};  // 0: not asked yet
  const unsigned wanted = grid_for(work, threads);
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= max_devices) {
    (void)cudaGetLastError();
    return wanted;
  }
  unsigned most = resident[dev].load(std::memory_order_relaxed);
  if (most == 0) {
    int sms = 0, per_sm = 0;
    if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess ||
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, static_cast<int>(threads),
                                                      0) != cudaSuccess) {
      (void)cudaGetLastError();
      return wanted;
    }
    most =
        static_cast<unsigned>(sms > 0 ? sms : 1) * static_cast<unsigned>(per_sm > 0 ? per_sm : 1);
    resident[dev].store(most, std::memory_order_relaxed);
  }
  return wanted < most ? wanted : most;
}

//! The first bytes of every CUDA workspace: the device words a frame's header depends on.
inline constexpr std::size_t status_bytes = 256;
inline bool is_decode(operation op) {
  return op == operation::decode || op == operation::decode_accumulate;
}
//! The workspace of an operation whose kernels use none beyond the encode's status words:
//! a decode needs none (only the sparse decode's index check writes a status word).
inline std::size_t status_only(operation op) { return is_decode(op) ? 0 : status_bytes; }
struct status_words {
  unsigned nonfinite;  //!< encode: an input value was NaN or Inf
  unsigned bad_index;  //!< sparse decode: an index out of range or out of order
};
inline status_words* status_of(mutable_bytes ws) {
  return reinterpret_cast<status_words*>(ws.data());
}
inline mutable_bytes after_status(mutable_bytes ws) {
  return {ws.data() + status_bytes, ws.size() - status_bytes};
}

//! Clears the status words before an encode's kernels run.
status begin_frame(mutable_bytes ws, void* stream);
//! Writes the header of `h` (flags | flag_nonfinite when a kernel reported one) before the
//! payload at `payload`.
status finish_frame(const frame_header& h, std::byte* payload, mutable_bytes ws, void* stream);
//! Frames on the device must start 16-byte aligned (cudaMalloc gives 256): the kernels
//! read and write scales and code words in place.
status check_frame_alignment(const std::byte* payload);
//! p[i] = g[i] + e[i] (f32, NaN as on the host: blocks::fadd_nan_first), the first step of
//! the generic error-feedback composition.
status feedback_sum(const_tensor_view g, const_tensor_view e, float* p, void* stream);
//! The generic error-feedback composition on the device, for codecs without a fused pass:
//! p = g + e (feedback_sum), encode(p) writes the frame, then decode_into(call, target)
//! writes residual = p - decoded.
template <class Encode, class DecodeInto>
status compose_feedback(const detail::feedback_call& c, float* p, Encode&& encode,
                        DecodeInto&& decode_into) {
  if (auto st = feedback_sum(c.enc.in, c.residual, p, c.enc.stream); !st.ok()) return st;
  if (auto st = encode(p); !st.ok()) return st;
  const detail::decode_call d{c.enc.hdr, c.enc.payload,   c.residual,    1.0f,
                              false,     c.enc.workspace, c.enc.threads, c.enc.stream};
  return decode_into(d, residual_target(c.residual, p));
}
//! Launches the header check of decode_expected (blocks::check_expected_header) into
//! *verdict: one thread, stream-ordered.
status check_header(const frame_header& expected, const std::byte* frame, std::uint64_t frame_bytes,
                    frame_verdict* verdict, void* stream);
//! out.emit(i, 0) for every i < n (a plain sparse decode's background), unless the
//! target's verdict is closed: one coalesced pass.
status zero_output(std::uint64_t n, const decode_target& out, void* stream);
//! Zeroes payload bytes [from, to) (padding): stream-ordered.
status zero_bytes(std::byte* payload, std::uint64_t from, std::uint64_t to, void* stream);

//! Grid-stride index of this thread and the stride.
__device__ __forceinline__ std::uint64_t thread_index() {
  return blockIdx.x * std::uint64_t{blockDim.x} + threadIdx.x;
}
__device__ __forceinline__ std::uint64_t thread_stride() {
  return std::uint64_t{gridDim.x} * blockDim.x;
}

}  // namespace gradcodec::cuda
