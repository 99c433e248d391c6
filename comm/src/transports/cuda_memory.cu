// SPDX-License-Identifier: Apache-2.0
//! @file
//! Device buffer services of the NCCL communicator (cuda_memory.hpp): stream-ordered
//! copies and grid-stride element kernels over element_ops.hpp.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>
#include <string>

#include "comm/src/transports/cuda_device_scope.hpp"
#include "comm/src/transports/cuda_memory.hpp"
#include "comm/src/element_ops.hpp"

namespace gradcodec::comm::detail {

namespace {

status cuda_failed(cudaError_t e, const char* what) {
  return {status_code::device_error, std::string(what).append(": ").append(cudaGetErrorString(e))};
}

#define GRADCODEC_COMM_CUDA(call)                                                        \
  do {                                                                                   \
    if (const cudaError_t e_ = (call); e_ != cudaSuccess) return cuda_failed(e_, #call); \
  } while (0)

//! Launch errors, named by the kernel (cudaGetLastError clears a non-sticky one).
status launched(const char* kernel) {
  if (const cudaError_t e = cudaGetLastError(); e != cudaSuccess) return cuda_failed(e, kernel);
  return {};
}

constexpr unsigned threads = 256;
//! Grid-stride launches: enough blocks to fill a large GPU, never more than the work.
unsigned blocks_for(std::uint64_t n) {
  return static_cast<unsigned>(std::min<std::uint64_t>((n + threads - 1) / threads, 8192));
}

__global__ void put_words_kernel(std::byte* dst, std::uint64_t first, std::uint64_t second) {
  // Byte by byte: a block header need not be 8-byte aligned.
  const unsigned i = threadIdx.x;
  const std::uint64_t w = i < 8 ? first : second;
  dst[i] = static_cast<std::byte>((w >> (8 * (i % 8))) & 0xFF);
}

__global__ void to_f32_kernel(const void* src, dtype type, std::uint64_t n, float divisor,
                              float* dst) {
  for (std::uint64_t j = blockIdx.x * std::uint64_t{blockDim.x} + threadIdx.x; j < n;
       j += std::uint64_t{gridDim.x} * blockDim.x)
    dst[j] = scaled(load_value(src, type, j), divisor);
}

__global__ void from_f32_kernel(const float* src, void* dst, dtype type, std::uint64_t n) {
  for (std::uint64_t j = blockIdx.x * std::uint64_t{blockDim.x} + threadIdx.x; j < n;
       j += std::uint64_t{gridDim.x} * blockDim.x)
    store_value(dst, type, j, src[j]);
}

__global__ void accumulate_kernel(const void* v, dtype type, std::uint64_t n, float alpha_lo,
                                  float alpha_hi, std::uint64_t split, float* acc) {
  for (std::uint64_t j = blockIdx.x * std::uint64_t{blockDim.x} + threadIdx.x; j < n;
       j += std::uint64_t{gridDim.x} * blockDim.x)
    acc[j] = accumulated(j < split ? alpha_lo : alpha_hi, load_value(v, type, j), acc[j]);
}

void release_device(void* p) noexcept { (void)cudaFree(p); }

//! For blocks that outlive their cuda_memory: waits for the block's device, then copies.
status detached_copy(void* dst, const void* src, std::size_t bytes) {
  if (bytes == 0) return {};
  cudaPointerAttributes a{};
  GRADCODEC_COMM_CUDA(cudaPointerGetAttributes(&a, src));
  int current = 0;
  GRADCODEC_COMM_CUDA(cudaGetDevice(&current));
  GRADCODEC_COMM_CUDA(cudaSetDevice(a.device));
  cudaError_t e = cudaDeviceSynchronize();
  if (e == cudaSuccess) e = cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost);
  (void)cudaSetDevice(current);
  if (e != cudaSuccess) return cuda_failed(e, "allreduce_state: copying device arrays back");
  return {};
}

}  // namespace

cuda_memory::~cuda_memory() {
  // A copy queued before a failed drain may still use the staging bytes (and cudaFreeHost
  // would wait behind a broken communicator's kernels): those are left behind.
  if (pinned_ != nullptr && !pinned_busy_) (void)cudaFreeHost(pinned_);
}

bool cuda_memory::accessible(const void* p) const noexcept {
  cudaPointerAttributes a{};
  if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  return a.type == cudaMemoryTypeManaged || (a.type == cudaMemoryTypeDevice && a.device == device_);
}

memory_ops::block cuda_memory::allocate(std::size_t bytes) noexcept {
  const device_scope on(device_);
  void* p = nullptr;
  if (cudaMalloc(&p, std::max<std::size_t>(bytes, 1)) != cudaSuccess) {
    (void)cudaGetLastError();
    return block(nullptr, {release_device});
  }
  block b(static_cast<std::byte*>(p), {release_device});
  // Zeroed in stream order: every later use of the block is queued behind this.
  if (cudaMemsetAsync(p, 0, bytes, stream_) != cudaSuccess) {
    (void)cudaGetLastError();
    return block(nullptr, {release_device});
  }
  return b;
}

status cuda_memory::drain() {
  if (auto st = drain_(); !st.ok()) return st;
  pinned_busy_ = false;
  return {};
}

status cuda_memory::staging(std::size_t bytes) {
  if (pinned_busy_)
    if (auto st = drain(); !st.ok()) return st;
  if (bytes <= pinned_bytes_) return {};
  if (pinned_ != nullptr) GRADCODEC_COMM_CUDA(cudaFreeHost(pinned_));
  pinned_ = nullptr;
  pinned_bytes_ = 0;
  const std::size_t want = std::max<std::size_t>(bytes, 4096);
  GRADCODEC_COMM_CUDA(cudaMallocHost(&pinned_, want));
  pinned_bytes_ = want;
  return {};
}

status cuda_memory::upload(void* dst, const void* host_src, std::size_t bytes) {
  if (bytes == 0) return {};
  const device_scope on(device_);
  if (auto st = staging(bytes); !st.ok()) return st;
  std::memcpy(pinned_, host_src, bytes);
  GRADCODEC_COMM_CUDA(cudaMemcpyAsync(dst, pinned_, bytes, cudaMemcpyHostToDevice, stream_));
  pinned_busy_ = true;
  return drain();  // the staging bytes are free again, and host_src was never read late
}

status cuda_memory::download(void* host_dst, const void* src, std::size_t width, std::size_t pitch,
                             std::size_t rows) {
  if (width == 0 || rows == 0) return {};
  const device_scope on(device_);
  if (auto st = staging(width * rows); !st.ok()) return st;
  if (rows == 1)
    GRADCODEC_COMM_CUDA(cudaMemcpyAsync(pinned_, src, width, cudaMemcpyDeviceToHost, stream_));
  else
    GRADCODEC_COMM_CUDA(cudaMemcpy2DAsync(pinned_, width, src, pitch, width, rows,
                                          cudaMemcpyDeviceToHost, stream_));
  pinned_busy_ = true;
  if (auto st = drain(); !st.ok()) return st;
  std::memcpy(host_dst, pinned_, width * rows);
  return {};
}

status cuda_memory::copy(void* dst, const void* src, std::size_t bytes) {
  const device_scope on(device_);
  if (bytes > 0)
    GRADCODEC_COMM_CUDA(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream_));
  return {};
}

status cuda_memory::zero(void* dst, std::size_t bytes) {
  const device_scope on(device_);
  if (bytes > 0) GRADCODEC_COMM_CUDA(cudaMemsetAsync(dst, 0, bytes, stream_));
  return {};
}

status cuda_memory::put_words(void* dst, std::uint64_t first, std::uint64_t second) {
  const device_scope on(device_);
  put_words_kernel<<<1, 16, 0, stream_>>>(static_cast<std::byte*>(dst), first, second);
  return launched("put_words_kernel");
}

status cuda_memory::to_f32(const_tensor_view src, float divisor, float* dst) {
  if (src.n == 0) return {};
  const device_scope on(device_);
  to_f32_kernel<<<blocks_for(src.n), threads, 0, stream_>>>(src.data, src.type, src.n, divisor,
                                                            dst);
  return launched("to_f32_kernel");
}

status cuda_memory::from_f32(const float* src, tensor_view dst) {
  if (dst.n == 0) return {};
  const device_scope on(device_);
  from_f32_kernel<<<blocks_for(dst.n), threads, 0, stream_>>>(src, dst.data, dst.type, dst.n);
  return launched("from_f32_kernel");
}

status cuda_memory::accumulate(const_tensor_view v, float alpha_lo, float alpha_hi,
                               std::uint64_t split, float* acc) {
  if (v.n == 0) return {};
  const device_scope on(device_);
  accumulate_kernel<<<blocks_for(v.n), threads, 0, stream_>>>(v.data, v.type, v.n, alpha_lo,
                                                              alpha_hi, split, acc);
  return launched("accumulate_kernel");
}

memory_ops::host_copy_fn cuda_memory::detached_download() const noexcept { return detached_copy; }

}  // namespace gradcodec::comm::detail
