// SPDX-License-Identifier: Apache-2.0
//! @file
//! W ranks as threads of one process, exchanging through shared memory: the single-process
//! simulation the multi-rank tests compare against, and a way to unit-test strategies
//! without MPI. Reductions run in rank order, so results are deterministic.
//!
//! Non-blocking calls complete when they are posted (every rank posts collectives in the
//! same order, so that cannot deadlock); wait() then only reports their status. A rank
//! that does not arrive at a collective within the group's timeout breaks the group: every
//! pending and later call on every rank returns comm_error instead of hanging.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <vector>

#include "gradcodec/comm/communicator.hpp"

namespace gradcodec::comm {

class thread_group;

class thread_communicator final : public communicator {
 public:
  //! The `size` communicators of a new group; hand communicator r to the thread of rank r.
  static std::vector<std::unique_ptr<thread_communicator>> create(
      int size, std::chrono::milliseconds timeout = std::chrono::seconds(120));

  thread_communicator(std::shared_ptr<thread_group> group, int rank);
  ~thread_communicator() override;

  [[nodiscard]] int rank() const noexcept override { return rank_; }
  [[nodiscard]] int size() const noexcept override;
  [[nodiscard]] std::string_view name() const noexcept override { return "thread"; }

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

 private:
  status posted(status st, request& req);

  std::shared_ptr<thread_group> group_;
  int rank_;
  std::uint64_t seq_ = 0;  // collectives issued: all ranks must agree
  std::uint64_t next_request_ = 1;
  std::uint64_t splits_ = 0;
  std::vector<std::byte> scratch_;  // allreduce result before it is copied out
};

//! Runs body(comm) for ranks 0..size-1 on `size` threads (one thread_communicator each)
//! and returns each rank's status, in rank order.
std::vector<status> run_threads(int size, const std::function<status(communicator&)>& body,
                                std::chrono::milliseconds timeout = std::chrono::seconds(120));

}  // namespace gradcodec::comm
