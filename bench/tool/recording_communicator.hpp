// SPDX-License-Identifier: Apache-2.0
//! @file
//! A communicator decorator for the allreduce benchmark: forwards every call to another
//! communicator and, while recording, keeps the shape of each collective (kind and sizes,
//! never the data). The recorded calls can be replayed with the same sizes and no
//! computation in between, which measures the pure transfer time of a compressed
//! allreduce, and turned into the bytes this rank puts on the network.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "gradcodec/comm/communicator.hpp"

namespace gradcodec::tool {

//! The shape of one collective call.
struct collective_call {
  enum class kind : std::uint8_t { allgatherv, alltoallv, allreduce, broadcast };
  kind what = kind::allgatherv;
  std::uint64_t send_bytes = 0;  //!< allgatherv: this rank's block; allreduce: count x size
  std::vector<std::uint64_t> send_sizes, recv_sizes;  //!< per rank (allgatherv: recv only)
  std::uint64_t count = 0;                            //!< allreduce: elements
  comm::element_type type = comm::element_type::u8;   //!< allreduce
  comm::reduce_op op = comm::reduce_op::sum;          //!< allreduce
  int root = 0;                                       //!< broadcast
};

class recording_communicator final : public comm::communicator {
 public:
  //! `inner` must outlive this communicator.
  explicit recording_communicator(comm::communicator& inner) : inner_(inner) {}

  [[nodiscard]] int rank() const noexcept override { return inner_.rank(); }
  [[nodiscard]] int size() const noexcept override { return inner_.size(); }
  [[nodiscard]] std::string_view name() const noexcept override { return inner_.name(); }
  [[nodiscard]] comm::memory_space memory() const noexcept override { return inner_.memory(); }

  status iallgatherv(const void* send, std::uint64_t send_bytes, void* recv,
                     std::span<const std::uint64_t> recv_bytes, comm::request& req) override;
  status ialltoallv(const void* send, std::span<const std::uint64_t> send_bytes, void* recv,
                    std::span<const std::uint64_t> recv_bytes, comm::request& req) override;
  status iallreduce(const void* send, void* recv, std::uint64_t count, comm::element_type type,
                    comm::reduce_op op, comm::request& req) override;
  status ibroadcast(void* buf, std::uint64_t bytes, int root, comm::request& req) override;
  status wait(comm::request& req) override { return inner_.wait(req); }
  status barrier() override { return inner_.barrier(); }
  //! Forwarded: the new communicator is the inner one's and is not recorded.
  status split(int color, int key, std::unique_ptr<comm::communicator>& out) override {
    return inner_.split(color, key, out);
  }

  //! Forgets the calls recorded so far and records the calls that follow.
  void start_recording() {
    calls_.clear();
    recording_ = true;
  }
  void stop_recording() { recording_ = false; }
  [[nodiscard]] std::span<const collective_call> calls() const noexcept { return calls_; }

  //! Runs `calls` again on the inner communicator with the same sizes, each one blocking,
  //! one after another, on scratch buffers (collective: every rank replays its own record
  //! of the same call sequence).
  status replay(std::span<const collective_call> calls);

 private:
  comm::communicator& inner_;
  bool recording_ = false;
  std::vector<collective_call> calls_;
  std::vector<std::byte> send_scratch_, recv_scratch_;
};

//! Bytes rank `rank` of `size` sends to other ranks for these calls, under the algorithms
//! of Open MPI's non-blocking collectives (libnbc) and a ring for large reductions:
//!   allgatherv: (size - 1) x its own block (each block goes straight to every peer);
//!   alltoallv:  the blocks for the other ranks;
//!   allreduce:  2 (size - 1) / size x the buffer (ring);
//!   broadcast:  the buffer on the root, 0 elsewhere.
std::uint64_t wire_bytes(std::span<const collective_call> calls, int rank, int size) noexcept;

}  // namespace gradcodec::tool
