// SPDX-License-Identifier: Apache-2.0
// Shared by the thread and MPI tests of the collective adapters: deterministic gradients,
// the scenario list (every codec with every strategy it supports, plus edge cases), and
// running a scenario on one rank or on a whole thread-communicator simulation.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "gradcodec/comm/allreduce.hpp"
#include "gradcodec/comm/thread_communicator.hpp"

namespace comm_test {

namespace gc = gradcodec;
namespace gcc = gradcodec::comm;

//! A call pattern run for a few steps with the state carried.
struct scenario {
  std::string name;
  std::string spec;
  gcc::strategy how = gcc::strategy::automatic;
  std::uint64_t n = 1000;
  std::uint64_t rows = 0;  // flat view rows (PowerSGD)
  //! When not empty: bucketed call over tensors of these (rows, n) shapes.
  std::vector<std::pair<std::uint64_t, std::uint64_t>> shapes;
  int steps = 3;
  gc::dtype type = gc::dtype::f32;
  bool error_feedback = true;
  bool average = true;
  bool pipeline = false;
  std::uint64_t segment = 0;
  int ranks_per_node = 0;  // > 0: hierarchical with nodes of this many consecutive ranks
  float scale = 1.0f;      // gradient magnitude
};

//! What one rank ends with: the output bytes of every step and the saved final state.
struct rank_result {
  gc::status st;
  std::vector<std::vector<std::byte>> outputs;
  std::vector<std::byte> state;
};

//! Whether every rank's status is ok, and all their messages (for failure output).
bool all_ok(const std::vector<gc::status>& v);
std::string messages(const std::vector<gc::status>& v);

//! A configuration of `spec` (which must parse) on the reference backend.
gcc::allreduce_config config(const char* spec, gcc::strategy how = gcc::strategy::automatic);

//! Deterministic gradient values of (rank, step): mixed magnitudes, some exact zeros.
std::vector<float> make_grad(std::uint64_t n, int rank, int step, float scale);

//! Every codec with every strategy it supports, and the edge cases (n < W, n not divisible
//! by W, empty threshold payloads, segments with and without pipelining, f16 input,
//! no error feedback, sums, buckets, hierarchies).
std::vector<scenario> all_scenarios();

//! Runs a scenario on one rank of `comm` (all ranks must call it).
rank_result run_scenario(gcc::communicator& comm, const scenario& sc);

//! The same scenario simulated on `world` threads; one result per rank.
std::vector<rank_result> simulate(const scenario& sc, int world);

//! A communicator that forwards to `inner` but, on rank `bad`, garbles what it sends in its
//! `nth` byte-moving collective (allgather(v) or alltoallv, counted from 1): every byte is
//! XORed with 0x5A, as a faulty NIC or a bug on that rank would. Split is not supported.
class corrupting_communicator final : public gcc::communicator {
 public:
  //! Rank `bad` garbles its nth send: every byte, or only bytes [from, to) of it.
  corrupting_communicator(gcc::communicator& inner, int bad, int nth, std::uint64_t from = 0,
                          std::uint64_t to = ~std::uint64_t{0})
      : inner_(inner), bad_(bad), nth_(nth), from_(from), to_(to) {}
  int rank() const noexcept override { return inner_.rank(); }
  int size() const noexcept override { return inner_.size(); }
  std::string_view name() const noexcept override { return inner_.name(); }
  gc::status iallgatherv(const void* send, std::uint64_t send_bytes, void* recv,
                         std::span<const std::uint64_t> recv_bytes, gcc::request& req) override;
  gc::status ialltoallv(const void* send, std::span<const std::uint64_t> send_bytes, void* recv,
                        std::span<const std::uint64_t> recv_bytes, gcc::request& req) override;
  gc::status iallreduce(const void* send, void* recv, std::uint64_t count, gcc::element_type type,
                        gcc::reduce_op op, gcc::request& req) override {
    return inner_.iallreduce(send, recv, count, type, op, req);
  }
  gc::status ibroadcast(void* buf, std::uint64_t bytes, int root, gcc::request& req) override {
    return inner_.ibroadcast(buf, bytes, root, req);
  }
  gc::status wait(gcc::request& req) override { return inner_.wait(req); }
  gc::status barrier() override { return inner_.barrier(); }
  gc::status split(int, int, std::unique_ptr<gcc::communicator>&) override {
    return {gc::status_code::invalid_argument, "corrupting_communicator cannot split"};
  }
  //! Whether this rank has garbled a send yet.
  bool corrupted() const noexcept { return corrupted_; }

 private:
  //! The bytes to send: `send` itself, or a garbled copy kept alive until the next call.
  const void* outgoing(const void* send, std::uint64_t bytes);

  gcc::communicator& inner_;
  int bad_, nth_, calls_ = 0;
  std::uint64_t from_, to_;
  bool corrupted_ = false;
  std::vector<std::byte> garbled_;
};

//! 64-bit FNV-1a of the output bytes of every step (and of the saved state when asked):
//! outputs must agree across ranks, states are per rank.
std::uint64_t digest(const rank_result& r, bool with_state = false);

}  // namespace comm_test
