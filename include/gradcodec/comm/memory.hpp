// SPDX-License-Identifier: Apache-2.0
//! @file
//! Where a communicator's buffers live, as the strategy layer of allreduce.hpp sees it: the
//! few buffer services (allocation, copies to and from the host, zeroing, dtype
//! conversion, ordered accumulation) that its strategies need besides codec calls and
//! collectives. The strategies are written once against this interface: host memory for
//! the thread and MPI communicators, device memory (CUDA kernels on the communicator's
//! stream) for NCCL. A communicator of another system can supply its own.
//!
//! Every operation is ordered after the ones issued before it on the same memory (a CUDA
//! stream for device memory); only download() waits for the data. Results must be the
//! bits the host loops give: IEEE fma, round-to-nearest-even conversions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "gradcodec/codec.hpp"
#include "gradcodec/status.hpp"
#include "gradcodec/views.hpp"

namespace gradcodec::comm {

//! Where a communicator's buffers must live.
enum class memory_space : std::uint8_t { host = 0, device = 1 };

class memory_ops {
 public:
  //! Frees a block. A plain function, so a block may outlive the memory_ops that made it.
  struct release_fn {
    void (*fn)(void*) noexcept = nullptr;
    void operator()(void* p) const noexcept {
      if (fn != nullptr && p != nullptr) fn(p);
    }
  };
  using block = std::unique_ptr<std::byte, release_fn>;

  memory_ops() = default;
  memory_ops(const memory_ops&) = delete;
  memory_ops& operator=(const memory_ops&) = delete;
  virtual ~memory_ops() = default;

  [[nodiscard]] virtual memory_space space() const noexcept = 0;
  //! The CUDA device of device memory (-1 for host memory): a workspace buffer made on
  //! one device is not reused on another.
  [[nodiscard]] virtual int device() const noexcept { return -1; }
  //! The backend and stream of codec calls on this memory (`requested` is the caller's
  //! allreduce_config::where, which host memory honours).
  [[nodiscard]] virtual backend codec_backend(backend requested) const noexcept = 0;
  [[nodiscard]] virtual void* stream() const noexcept { return nullptr; }
  //! Whether the strategies may hand `p` to this memory's operations (device memory:
  //! device or managed allocations).
  [[nodiscard]] virtual bool accessible(const void* p) const noexcept = 0;

  //! `bytes` zeroed bytes, at least 64-byte aligned; an empty block when out of memory.
  virtual block allocate(std::size_t bytes) noexcept = 0;

  //! Host memory -> this memory. The host bytes may be reused when the call returns.
  virtual status upload(void* dst, const void* host_src, std::size_t bytes) = 0;
  //! This memory -> host memory: `rows` runs of `width` bytes, `pitch` bytes apart in
  //! src, packed in dst. Waits for the work issued before it.
  virtual status download(void* host_dst, const void* src, std::size_t width, std::size_t pitch,
                          std::size_t rows) = 0;
  status download(void* host_dst, const void* src, std::size_t bytes) {
    return download(host_dst, src, bytes, bytes, 1);
  }
  //! Within this memory; the ranges do not overlap.
  virtual status copy(void* dst, const void* src, std::size_t bytes) = 0;
  virtual status zero(void* dst, std::size_t bytes) = 0;
  //! Writes two 64-bit words (a block header) at dst, little-endian, at any alignment.
  virtual status put_words(void* dst, std::uint64_t first, std::uint64_t second) = 0;

  //! dst[j] = float(src[j]) / divisor, for j < src.n.
  virtual status to_f32(const_tensor_view src, float divisor, float* dst) = 0;
  //! dst[j] = dst.type(src[j]) (round to nearest even), for j < dst.n.
  virtual status from_f32(const float* src, tensor_view dst) = 0;
  //! acc[j] = fma(j < split ? alpha_lo : alpha_hi, float(v[j]), acc[j]), for j < v.n.
  virtual status accumulate(const_tensor_view v, float alpha_lo, float alpha_hi,
                            std::uint64_t split, float* acc) = 0;
  //! Waits for every operation issued so far.
  virtual status synchronize() = 0;

  //! A copy to host memory that needs no memory_ops object, for blocks that outlive it
  //! (a device-resident allreduce_state saved after its communicator is gone). It waits
  //! for all work queued on the device first.
  using host_copy_fn = status (*)(void* host_dst, const void* src, std::size_t bytes);
  [[nodiscard]] virtual host_copy_fn detached_download() const noexcept = 0;
};

//! Host memory: aligned operator new, memcpy and plain loops.
memory_ops& host_memory() noexcept;

}  // namespace gradcodec::comm
