// SPDX-License-Identifier: Apache-2.0
//! @file
//! What the GPU tests ask of their environment: whether a CUDA device is visible (they skip
//! with a message otherwise), the size cap GRADCODEC_TEST_MAX_N (scripts/gpu-check runs
//! them under compute-sanitizer, which is 10-100x slower, with small sizes only), and
//! device buffers poisoned or filled from host bytes.
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdlib>
#include <vector>

#include "gradcodec/codec.hpp"

namespace gradcodec::test {

inline bool have_gpu() { return gradcodec::backend_available(gradcodec::backend::cuda); }

//! The first line of every CUDA test (backend, PowerSGD phases, fused kernels): skip, with
//! the runtime's own reason (a driver older than the runtime is not "no GPU"), where no GPU
//! is usable.
#define SKIP_WITHOUT_GPU()                      \
  if (!::gradcodec::test::have_gpu())           \
  GTEST_SKIP() << "the CUDA tests need a GPU: " \
               << ::gradcodec::backend_unavailable_reason(::gradcodec::backend::cuda)

inline std::size_t max_n() {
  const char* e = std::getenv("GRADCODEC_TEST_MAX_N");
  return e != nullptr ? static_cast<std::size_t>(std::strtoull(e, nullptr, 10)) : ~std::size_t{0};
}

//! Captures what `queue()` enqueues on `s` into a CUDA graph and instantiates it (the graph
//! itself is freed; destroy the result with cudaGraphExecDestroy). `queue` returns whether
//! its calls were accepted; a failed call or capture fails the test and returns null. Run
//! the same calls once before capturing: under lazy module loading a kernel's first launch
//! loads its module, which must not happen inside a capture (docs/cuda.md).
template <class Queue>
cudaGraphExec_t capture_graph(cudaStream_t s, Queue queue) {
  cudaGraph_t graph = nullptr;
  if (cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal) != cudaSuccess) {
    ADD_FAILURE() << "cudaStreamBeginCapture failed";
    return nullptr;
  }
  const bool accepted = queue();
  const cudaError_t ended = cudaStreamEndCapture(s, &graph);
  EXPECT_EQ(ended, cudaSuccess) << cudaGetErrorString(ended);
  EXPECT_TRUE(accepted) << "a call refused to be captured";
  cudaGraphExec_t exec = nullptr;
  if (ended == cudaSuccess && accepted)
    EXPECT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  if (graph != nullptr) cudaGraphDestroy(graph);
  return exec;
}

//! Device memory holding a copy of host bytes (or `size` poisoned bytes).
struct device_bytes {
  std::byte* ptr = nullptr;
  std::size_t size = 0;
  explicit device_bytes(std::size_t n, int fill = 0xA5) : size(n) {
    EXPECT_EQ(cudaMalloc(&ptr, n + 256), cudaSuccess);
    EXPECT_EQ(cudaMemset(ptr, fill, n + 256), cudaSuccess);
    // Tests also work on non-blocking streams, which are not ordered after these.
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  }
  explicit device_bytes(const std::vector<std::byte>& host) : device_bytes(host.size()) {
    EXPECT_EQ(cudaMemcpy(ptr, host.data(), host.size(), cudaMemcpyHostToDevice), cudaSuccess);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);  // a pageable upload may still land late
  }
  ~device_bytes() { cudaFree(ptr); }
  device_bytes(const device_bytes&) = delete;
  device_bytes& operator=(const device_bytes&) = delete;
  //! The first `n` bytes plus the 256 guard bytes behind the buffer.
  std::vector<std::byte> read(std::size_t n) const {
    std::vector<std::byte> h(n + 256);
    EXPECT_EQ(cudaMemcpy(h.data(), ptr, n + 256, cudaMemcpyDeviceToHost), cudaSuccess);
    return h;
  }
};

}  // namespace gradcodec::test
