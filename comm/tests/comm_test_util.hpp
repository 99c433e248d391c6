// SPDX-License-Identifier: Apache-2.0
// Shared by the thread and MPI tests of the collective adapters: deterministic gradients,
// the scenario list (every codec with every strategy it supports, plus edge cases), and
// running a scenario on one rank or on a whole thread-communicator simulation.
#pragma once

#include <cstdint>
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

//! 64-bit FNV-1a of the output bytes of every step (and of the saved state when asked):
//! outputs must agree across ranks, states are per rank.
std::uint64_t digest(const rank_result& r, bool with_state = false);

}  // namespace comm_test
