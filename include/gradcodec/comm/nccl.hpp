// SPDX-License-Identifier: Apache-2.0
//! @file
//! comm::communicator over NCCL (target gradcodec::nccl): every call is enqueued on the
//! communicator's CUDA stream and works on device buffers; wait() polls the request's
//! event and ncclCommGetAsyncError, so a failed peer surfaces as comm_error instead of a
//! hang inside cudaStreamSynchronize (RAFT's sync_stream). allgatherv is a group of
//! broadcasts, alltoallv a group of send/recv pairs (the rank's own block is a device
//! copy). The allreduce strategies run on it with device buffers (in, out, the state's
//! arrays and the workspace on the communicator's GPU; codec calls on the CUDA backend,
//! everything queued on its stream) when the library has the CUDA backend; without it,
//! memory_services() is null and allreduce refuses the communicator.
//!
//! Non-blocking communicators (`config.blocking = 0`, e.g. one borrowed from PyTorch) work:
//! an enqueue, group end or split that returns ncclInProgress is polled with
//! ncclCommGetAsyncError until it settles, as NCCL documents. allgatherv issues at most 1024
//! broadcasts per group (NCCL allows 2048 operations in one); alltoallv is one group of a
//! send and a receive per peer, so it takes at most 1024 ranks. The scratch and the events
//! live on the communicator's device, whatever device the calling thread has current.
//!
//! Limits: a peer that dies without NCCL noticing (single-node shared-memory and P2P
//! transports may not) still leaves wait() polling: there is no timeout.
#pragma once

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <memory>
#include <vector>

#include "gradcodec/comm/communicator.hpp"

namespace gradcodec::comm {

class nccl_communicator final : public communicator {
 public:
  //! Wraps `comm` and issues every call on `stream`. With `owned`, the destructor
  //! destroys comm (a failed create leaves it to the caller). The allreduce strategies'
  //! codec calls launch on the current CUDA device, which must then be comm's. After an
  //! asynchronous NCCL error every call returns that error; an owned comm is aborted at once, a
  //! borrowed one is left for the caller to abort.
  static status create(ncclComm_t comm, cudaStream_t stream, bool owned,
                       std::unique_ptr<nccl_communicator>& out);
  ~nccl_communicator() override;

  [[nodiscard]] int rank() const noexcept override { return rank_; }
  [[nodiscard]] int size() const noexcept override { return size_; }
  [[nodiscard]] std::string_view name() const noexcept override { return "nccl"; }
  [[nodiscard]] memory_space memory() const noexcept override { return memory_space::device; }
  //! Device buffer services on this communicator's stream; null in a library built
  //! without the CUDA backend.
  [[nodiscard]] memory_ops* memory_services() noexcept override { return memory_.get(); }
  [[nodiscard]] ncclComm_t handle() const noexcept { return comm_; }
  [[nodiscard]] cudaStream_t stream() const noexcept { return stream_; }

  status iallgather(const void* send, std::uint64_t send_bytes, void* recv, request& req) override;
  status iallgatherv(const void* send, std::uint64_t send_bytes, void* recv,
                     std::span<const std::uint64_t> recv_bytes, request& req) override;
  status ialltoallv(const void* send, std::span<const std::uint64_t> send_bytes, void* recv,
                    std::span<const std::uint64_t> recv_bytes, request& req) override;
  status iallreduce(const void* send, void* recv, std::uint64_t count, element_type type,
                    reduce_op op, request& req) override;
  status ibroadcast(void* buf, std::uint64_t bytes, int root, request& req) override;
  status wait(request& req) override;
  status barrier() override;
  //! ncclCommSplit; the new communicator shares this one's stream and is owned.
  status split(int color, int key, std::unique_ptr<communicator>& out) override;

 private:
  nccl_communicator(ncclComm_t comm, cudaStream_t stream, bool owned);
  //! Records an event after the work just enqueued and returns it as a request.
  status track(request& req);
  status nccl_failed(ncclResult_t r, std::string_view call) const;

  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
  bool owned_ = false;
  status broken_{};  // the asynchronous error that ended this communicator, if any
  int rank_ = 0, size_ = 1;
  int device_ = 0;           // comm's CUDA device (ncclCommCuDevice)
  void* scratch_ = nullptr;  // 4 device bytes for barrier()
  std::uint64_t next_id_ = 1;
  std::vector<std::pair<std::uint64_t, cudaEvent_t>> pending_;
  std::vector<cudaEvent_t> spare_;
  std::unique_ptr<memory_ops> memory_;
};

}  // namespace gradcodec::comm
