// SPDX-License-Identifier: Apache-2.0
//! @file
//! The strategies, each a function of the run (docs/comm.md).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "comm/src/run.hpp"
#include "gradcodec/comm/allreduce.hpp"
#include "gradcodec/powersgd.hpp"

namespace gradcodec::comm::detail {

//! What the majority vote keeps between calls: the received sign frames.
struct vote_buffers {
  std::vector<const_bytes> frames;
};

//! What the dense PowerSGD strategy keeps between calls: its segments (one per tensor slot
//! and per gap between slots), P and the dense tensors, and the P factors to orthogonalize.
struct powersgd_dense_buffers {
  std::vector<tensor_slot> pieces;
  buffer values;
  std::vector<powersgd_matrix> matrices;
};

status run_allgather(run& r);
status run_two_phase(run& r);  // also the dense strategy of fp16/bf16
status run_randomk_dense(run& r);
status run_majority_vote(run& r);
status run_powersgd_dense(run& r);
//! Floats of Q the dense PowerSGD strategy keeps for these segments.
std::uint64_t powersgd_q_size(const codec_spec& spec, std::span<const tensor_slot> pieces);

}  // namespace gradcodec::comm::detail
