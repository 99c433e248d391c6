// SPDX-License-Identifier: Apache-2.0
//! @file
//! The agreement every call starts with: one allreduce(max) of the configuration's
//! fields and their complements, so every rank returns the same outcome.
#pragma once

#include <cstdint>
#include <string_view>

#include "comm/src/buffers.hpp"
#include "gradcodec/comm/allreduce.hpp"

namespace gradcodec::comm::detail {

//! The fingerprint check of docs/comm.md: one allreduce(max) of F fields and their
//! complements; on disagreement every rank gets the same comm_error.
struct agreement {
  std::uint64_t fields[18] = {};
  std::uint64_t local_failure = ~std::uint64_t{0};  // (rank << 16) | reason, or all ones
};
//! The allreduce runs through `staging` in the communicator's memory `mem`.
status agree(communicator& c, memory_ops& mem, buffer& staging, const agreement& a,
             phase_times* times);

//! Reason codes a rank reports in the agreement when its own checks fail.
enum class local_reason : std::uint16_t {
  invalid_spec = 1,
  unsupported_strategy = 2,
  bad_views = 3,
  bad_tensors = 4,
  state_mismatch = 5,
  bad_hierarchy = 6,
  nonfinite_on_device = 7,
};
std::string_view reason_text(local_reason r) noexcept;

}  // namespace gradcodec::comm::detail
