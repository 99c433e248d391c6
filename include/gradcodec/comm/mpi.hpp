// SPDX-License-Identifier: Apache-2.0
//! @file
//! comm::communicator over an MPI communicator (target gradcodec::mpi). The adapter works
//! on its own duplicate of the communicator with MPI_ERRORS_RETURN set, so MPI errors come
//! back as comm_error statuses (with MPI_Error_string's text) instead of aborting the job.
//! Host memory only (Open MPI here is not CUDA-aware). Only this header includes mpi.h;
//! the core library never does.
#pragma once

#include <chrono>
#include <memory>
#include <vector>

#include <mpi.h>

#include "gradcodec/comm/communicator.hpp"

namespace gradcodec::comm {

class mpi_communicator final : public communicator {
 public:
  //! Duplicates `comm` (collective over it). MPI must be initialized, with at least
  //! MPI_THREAD_SERIALIZED if several threads use communicators.
  static status create(MPI_Comm comm, std::unique_ptr<mpi_communicator>& out);
  ~mpi_communicator() override;

  [[nodiscard]] int rank() const noexcept override { return rank_; }
  [[nodiscard]] int size() const noexcept override { return size_; }
  [[nodiscard]] std::string_view name() const noexcept override { return "mpi"; }
  //! The duplicated communicator (for the caller's own MPI calls on the same group).
  [[nodiscard]] MPI_Comm handle() const noexcept { return comm_; }

  //! How wait() waits: zero (the default) is MPI_Wait, which spins until the request
  //! completes; a positive interval tests the request and sleeps that long between tests,
  //! so a thread waiting beside the caller's compute on a shared core (the outer
  //! synchronizer's delayed sync) leaves the core to it, at the price of up to one
  //! interval of latency per wait.
  void set_wait_poll(std::chrono::microseconds interval) noexcept { wait_poll_ = interval; }
  [[nodiscard]] std::chrono::microseconds wait_poll() const noexcept { return wait_poll_; }

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
  status split(int color, int key, std::unique_ptr<communicator>& out) override;

  //! The node of this rank for make_hierarchy(): the lowest rank of the communicator that
  //! shares its memory (MPI_Comm_split_type with MPI_COMM_TYPE_SHARED). Collective.
  status node_color(int& color);

 private:
  explicit mpi_communicator(MPI_Comm dup);
  struct pending;
  status post(pending&& p, request& req);
  status datatype(std::uint64_t unit, MPI_Datatype& out);

  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0, size_ = 1;
  std::chrono::microseconds wait_poll_{0};
  std::uint64_t next_id_ = 1;
  std::vector<pending> pending_;                               // in flight, in posting order
  std::vector<std::pair<std::uint64_t, MPI_Datatype>> types_;  // contiguous byte blocks by size
};

}  // namespace gradcodec::comm
