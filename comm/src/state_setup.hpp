// SPDX-License-Identifier: Apache-2.0
//! @file
//! Fitting an allreduce_state to a run: its fingerprint, sizes, initialisation and
//! placement in the communicator's memory.
#pragma once

#include <cstdint>

#include "comm/src/run.hpp"
#include "gradcodec/comm/allreduce.hpp"

namespace gradcodec::comm::detail {

//! The configuration hash stored in the state (docs/comm.md, "State format").
std::uint64_t config_fingerprint(const allreduce_config& cfg, strategy how, std::uint64_t n,
                                 std::uint64_t rows, state_role role) noexcept;

//! Floats of each state array a run needs.
struct state_sizes {
  std::uint64_t worker = 0, server = 0, q = 0;
};
state_sizes expected_sizes(const run& r, state_role role);

//! Sizes a fresh state for a run (residuals zero, q not ready).
void init_state(run& r, state_role role, std::uint64_t fingerprint);
//! Whether an initialized state belongs to this run.
bool state_matches(const run& r, state_role role, std::uint64_t fingerprint);
//! Moves the state's arrays into the run's memory when they are elsewhere, and points
//! the run at them.
status place_state(run& r);

}  // namespace gradcodec::comm::detail
