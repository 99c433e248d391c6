// SPDX-License-Identifier: Apache-2.0
//! @file
//! A small byte-level communicator interface (modelled on RAFT's comms_iface and NCCL's
//! calling habits): the strategy layer of the collective adapters is written once against
//! it, and thread_communicator (threads in one process), mpi_communicator and
//! nccl_communicator implement it. Every call returns a gradcodec::status; nothing throws.
//!
//! Conventions shared by every implementation:
//! - All ranks call the same collectives in the same order (blocking and non-blocking
//!   alike, as MPI requires); sizes are in bytes unless a call says elements.
//! - Variable-size calls pack blocks back to back in rank order: rank r's block starts at
//!   the sum of the sizes of ranks 0..r-1 (no separate displacement arrays).
//! - Size spans are read during the call only; data buffers of a non-blocking call must
//!   stay valid and untouched until wait() returns for its request.
//! - Send and receive buffers must not overlap, except allreduce, which may run in place
//!   (send == recv).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string_view>

#include "gradcodec/comm/memory.hpp"
#include "gradcodec/status.hpp"

namespace gradcodec::comm {

//! Element types of allreduce. Integer sums are exact (so they are the same on every rank
//! whatever the reduction order); floating-point sums are only as deterministic as the
//! transport's reduction order, so the strategy layer never relies on them.
enum class element_type : std::uint8_t {
  u8 = 0,
  i32 = 1,
  u32 = 2,
  i64 = 3,
  u64 = 4,
  f32 = 5,
  f64 = 6
};

constexpr std::size_t element_size(element_type t) noexcept {
  switch (t) {
    case element_type::u8: return 1;
    case element_type::i32:
    case element_type::u32:
    case element_type::f32: return 4;
    case element_type::i64:
    case element_type::u64:
    case element_type::f64: return 8;
  }
  return 0;
}
std::string_view element_name(element_type t) noexcept;

enum class reduce_op : std::uint8_t { sum = 0, max = 1, min = 2 };
std::string_view reduce_op_name(reduce_op op) noexcept;

//! A pending non-blocking operation, completed by communicator::wait(). A request is a
//! handle owned by the communicator that issued it; a default-constructed one is inactive
//! and waiting on it succeeds at once.
class request {
 public:
  constexpr request() noexcept = default;
  constexpr explicit request(std::uint64_t id) noexcept : id_(id) {}
  [[nodiscard]] constexpr bool active() const noexcept { return id_ != 0; }
  [[nodiscard]] constexpr std::uint64_t id() const noexcept { return id_; }

 private:
  std::uint64_t id_ = 0;
};

//! The byte-level communicator. Implementations override the non-blocking calls, wait(),
//! barrier() and split(); the blocking calls default to "post, then wait".
class communicator {
 public:
  communicator() = default;
  communicator(const communicator&) = delete;
  communicator& operator=(const communicator&) = delete;
  virtual ~communicator() = default;

  [[nodiscard]] virtual int rank() const noexcept = 0;
  [[nodiscard]] virtual int size() const noexcept = 0;
  //! "thread", "mpi", "nccl": for messages and logs.
  [[nodiscard]] virtual std::string_view name() const noexcept = 0;
  //! Host memory for the thread and MPI communicators, device memory for NCCL.
  [[nodiscard]] virtual memory_space memory() const noexcept { return memory_space::host; }
  //! The buffer services the allreduce strategies use on memory(); null where there are
  //! none (NCCL in a library built without the CUDA backend; by default, device memory).
  [[nodiscard]] virtual memory_ops* memory_services() noexcept {
    return memory() == memory_space::host ? &host_memory() : nullptr;
  }

  // --- non-blocking collectives ------------------------------------------------------

  //! Every rank contributes `send_bytes`; recv receives size() * send_bytes, rank order.
  virtual status iallgather(const void* send, std::uint64_t send_bytes, void* recv, request& req);
  //! Rank r contributes recv_bytes[r] bytes (send_bytes on rank r must equal it); recv
  //! receives the blocks packed in rank order. recv_bytes has size() entries.
  virtual status iallgatherv(const void* send, std::uint64_t send_bytes, void* recv,
                             std::span<const std::uint64_t> recv_bytes, request& req) = 0;
  //! send holds size() blocks packed in destination order (send_bytes[d] bytes for rank d);
  //! recv receives recv_bytes[s] bytes from each source s, packed in source order. The
  //! sizes of a pair must agree on both sides; zero-byte blocks are allowed.
  virtual status ialltoallv(const void* send, std::span<const std::uint64_t> send_bytes, void* recv,
                            std::span<const std::uint64_t> recv_bytes, request& req) = 0;
  //! Element-wise reduction of `count` elements over all ranks; send == recv is allowed.
  virtual status iallreduce(const void* send, void* recv, std::uint64_t count, element_type type,
                            reduce_op op, request& req) = 0;
  //! Copies `bytes` bytes of root's buf into every other rank's buf.
  virtual status ibroadcast(void* buf, std::uint64_t bytes, int root, request& req) = 0;

  //! Completes a request (no-op for an inactive one) and makes it inactive.
  virtual status wait(request& req) = 0;
  //! Waits for every request, even after one fails; returns the first failure.
  status wait_all(std::span<request> reqs);

  // --- blocking collectives (default: post, then wait) --------------------------------

  virtual status allgather(const void* send, std::uint64_t send_bytes, void* recv);
  virtual status allgatherv(const void* send, std::uint64_t send_bytes, void* recv,
                            std::span<const std::uint64_t> recv_bytes);
  virtual status alltoallv(const void* send, std::span<const std::uint64_t> send_bytes, void* recv,
                           std::span<const std::uint64_t> recv_bytes);
  virtual status allreduce(const void* send, void* recv, std::uint64_t count, element_type type,
                           reduce_op op);
  virtual status broadcast(void* buf, std::uint64_t bytes, int root);
  virtual status barrier() = 0;

  //! Collective: ranks passing the same color form a new communicator, ordered by (key,
  //! rank). A negative color takes part without joining one (out becomes null).
  virtual status split(int color, int key, std::unique_ptr<communicator>& out) = 0;

 protected:
  //! The argument checks every iallgatherv shares: one recv_bytes entry per rank, and this
  //! rank's entry equal to send_bytes (invalid_argument otherwise).
  [[nodiscard]] status check_allgatherv(std::uint64_t send_bytes,
                                        std::span<const std::uint64_t> recv_bytes) const;
};

//! The two levels of a hierarchical allreduce: `intra` holds the ranks of one node (its
//! rank 0 is the node leader), `inter` the node leaders (null on every other rank).
//! `world` is the communicator both were split from; it must outlive the hierarchy.
struct hierarchy {
  communicator* world = nullptr;
  std::unique_ptr<communicator> intra;
  std::unique_ptr<communicator> inter;

  [[nodiscard]] bool leader() const noexcept { return intra != nullptr && intra->rank() == 0; }
};

//! Collective over `world`: ranks passing the same node_color (>= 0) form one node, its
//! lowest world rank being the leader; the leaders form the inter-node communicator.
//! mpi_communicator::node_color() gives the shared-memory node of a rank.
status make_hierarchy(communicator& world, int node_color, hierarchy& out);

}  // namespace gradcodec::comm
