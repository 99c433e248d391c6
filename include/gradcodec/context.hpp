// SPDX-License-Identifier: Apache-2.0
//! @file
//! The context that keys every random decision: (seed, step, tensor id). Ranks that pass
//! the same context draw the same numbers, on every backend.
#pragma once

#include <cstdint>

namespace gradcodec {

struct context {
  std::uint64_t seed = 0;       //!< shared by all ranks of a job
  std::uint64_t step = 0;       //!< training step (advance it every step)
  std::uint64_t tensor_id = 0;  //!< which tensor or bucket of the step
};

}  // namespace gradcodec
