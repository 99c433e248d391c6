// SPDX-License-Identifier: Apache-2.0
//! @file
//! The strategies, each a function of the run (docs/comm.md).
#pragma once

#include <cstdint>
#include <span>

#include "comm/src/run.hpp"
#include "gradcodec/comm/allreduce.hpp"

namespace gradcodec::comm::detail {

status run_allgather(run& r);
status run_two_phase(run& r);  // also the dense strategy of fp16/bf16
status run_randomk_dense(run& r);
status run_majority_vote(run& r);
status run_powersgd_dense(run& r);
//! Floats of Q the dense PowerSGD strategy keeps for these segments.
std::uint64_t powersgd_q_size(const codec_spec& spec, std::span<const tensor_slot> pieces);

}  // namespace gradcodec::comm::detail
