// SPDX-License-Identifier: Apache-2.0
// Device memory simulated on the host, so the strategies' device paths (state and
// workspace in the communicator's memory, headers copied across, no host loops over
// device data) run and are checked on machines without a GPU. Blocks come from a
// registry, and every buffer operation and every collective of device_like_communicator
// checks that its device pointers lie inside registered blocks: a host buffer handed to
// device code, or a device buffer read as host memory by a buffer service, is reported.
#pragma once

#include <atomic>
#include <memory>

#include "comm_test_util.hpp"
#include "gradcodec/comm/memory.hpp"

namespace comm_test {

class simulated_device_memory final : public gcc::memory_ops {
 public:
  [[nodiscard]] gcc::memory_space space() const noexcept override {
    return gcc::memory_space::device;
  }
  [[nodiscard]] int device() const noexcept override { return 0; }
  [[nodiscard]] gc::backend codec_backend(gc::backend requested) const noexcept override {
    return requested;
  }
  [[nodiscard]] bool accessible(const void* p) const noexcept override;
  block allocate(std::size_t bytes) noexcept override;
  gc::status upload(void* dst, const void* src, std::size_t bytes) override;
  gc::status download(void* dst, const void* src, std::size_t width, std::size_t pitch,
                      std::size_t rows) override;
  using memory_ops::download;
  gc::status copy(void* dst, const void* src, std::size_t bytes) override;
  gc::status zero(void* dst, std::size_t bytes) override;
  gc::status put_words(void* dst, std::uint64_t first, std::uint64_t second) override;
  gc::status to_f32(gc::const_tensor_view src, float divisor, float* dst) override;
  gc::status from_f32(const float* src, gc::tensor_view dst) override;
  gc::status accumulate(gc::const_tensor_view v, float alpha_lo, float alpha_hi,
                        std::uint64_t split, float* acc) override;
  gc::status synchronize() override { return {}; }
  [[nodiscard]] host_copy_fn detached_download() const noexcept override;

  //! The next n allocations of this memory fail (an empty block), as a full GPU's would.
  void fail_next_allocations(int n) noexcept { failing_ = n; }

  //! Whether [p, p + bytes) lies inside one registered block (always for 0 bytes).
  static bool inside(const void* p, std::size_t bytes) noexcept;
  //! Operations and collectives refused so far for pointers outside the blocks.
  static std::uint64_t violations() noexcept;

 private:
  int failing_ = 0;
};

//! Forwards to `inner` (host memory), presenting itself as a device communicator whose
//! buffers are simulated_device_memory blocks; a collective given any other buffer is
//! refused (internal_error) and counted in violations().
class device_like_communicator final : public gcc::communicator {
 public:
  explicit device_like_communicator(gcc::communicator& inner) : inner_(&inner) {}
  explicit device_like_communicator(std::unique_ptr<gcc::communicator> owned)
      : inner_(owned.get()), owned_(std::move(owned)) {}

  int rank() const noexcept override { return inner_->rank(); }
  int size() const noexcept override { return inner_->size(); }
  std::string_view name() const noexcept override { return "simulated-device"; }
  gcc::memory_space memory() const noexcept override { return gcc::memory_space::device; }
  gcc::memory_ops* memory_services() noexcept override { return &mem_; }

  gc::status iallgatherv(const void* send, std::uint64_t send_bytes, void* recv,
                         std::span<const std::uint64_t> recv_bytes, gcc::request& req) override;
  gc::status ialltoallv(const void* send, std::span<const std::uint64_t> send_bytes, void* recv,
                        std::span<const std::uint64_t> recv_bytes, gcc::request& req) override;
  gc::status iallreduce(const void* send, void* recv, std::uint64_t count, gcc::element_type type,
                        gcc::reduce_op op, gcc::request& req) override;
  gc::status ibroadcast(void* buf, std::uint64_t bytes, int root, gcc::request& req) override;
  gc::status wait(gcc::request& req) override { return inner_->wait(req); }
  gc::status barrier() override { return inner_->barrier(); }
  gc::status split(int color, int key, std::unique_ptr<gcc::communicator>& out) override;

 private:
  gcc::communicator* inner_;
  std::unique_ptr<gcc::communicator> owned_;
  simulated_device_memory mem_;
};

//! simulate() with every rank's communicator wrapped in a device_like_communicator.
std::vector<rank_result> simulate_on_device(const scenario& sc, int world);

}  // namespace comm_test
