// SPDX-License-Identifier: Apache-2.0
//! @file
//! The buffer services of device memory for the NCCL communicator: cudaMalloc blocks, and
//! copies and element kernels (element_ops.hpp, the host loops' arithmetic) queued on the
//! communicator's stream. Host copies go through pinned staging and wait by polling (the
//! communicator's `drain`), so a peer that dies surfaces as an NCCL error, not a hang.
#pragma once

#include <cuda_runtime_api.h>

#include <functional>

#include "gradcodec/comm/memory.hpp"

namespace gradcodec::comm::detail {

class cuda_memory final : public memory_ops {
 public:
  //! `drain` waits for everything queued on `stream` so far (nccl_communicator: an event
  //! polled together with ncclCommGetAsyncError).
  cuda_memory(cudaStream_t stream, int device, std::function<status()> drain)
      : stream_(stream), device_(device), drain_(std::move(drain)) {}
  ~cuda_memory() override;

  [[nodiscard]] memory_space space() const noexcept override { return memory_space::device; }
  [[nodiscard]] int device() const noexcept override { return device_; }
  [[nodiscard]] backend codec_backend(backend) const noexcept override { return backend::cuda; }
  [[nodiscard]] void* stream() const noexcept override { return stream_; }
  [[nodiscard]] bool accessible(const void* p) const noexcept override;

  block allocate(std::size_t bytes) noexcept override;
  status upload(void* dst, const void* host_src, std::size_t bytes) override;
  status download(void* host_dst, const void* src, std::size_t width, std::size_t pitch,
                  std::size_t rows) override;
  using memory_ops::download;
  status copy(void* dst, const void* src, std::size_t bytes) override;
  status zero(void* dst, std::size_t bytes) override;
  status put_words(void* dst, std::uint64_t first, std::uint64_t second) override;
  status to_f32(const_tensor_view src, float divisor, float* dst) override;
  status from_f32(const float* src, tensor_view dst) override;
  status accumulate(const_tensor_view v, float alpha_lo, float alpha_hi, std::uint64_t split,
                    float* acc) override;
  status synchronize() override { return drain_(); }
  [[nodiscard]] host_copy_fn detached_download() const noexcept override;

 private:
  //! Pinned host bytes for copies, grown on demand; waits first if a copy may still use
  //! them (after a failed drain).
  status staging(std::size_t bytes);
  //! Waits for the stream; the staging bytes are free afterwards.
  status drain();

  cudaStream_t stream_;
  int device_;
  std::function<status()> drain_;
  void* pinned_ = nullptr;
  std::size_t pinned_bytes_ = 0;
  bool pinned_busy_ = false;  // a queued copy may still read or write pinned_
};

}  // namespace gradcodec::comm::detail
