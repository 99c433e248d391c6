// SPDX-License-Identifier: Apache-2.0
//! @file
//! The pipeline driver: a strategy as stages over segments.
#pragma once

#include <cstdint>

#include "comm/src/buffers.hpp"
#include "comm/src/run.hpp"

namespace gradcodec::comm::detail {

//! A strategy as stages over segments: stage 0 starts a segment and posts its first
//! exchange; stage k (1..exchanges-1) waits for exchange k-1 and posts exchange k; the
//! last stage waits for the last exchange and finishes the segment. A stage returns an
//! error only when the communicator failed (everything stops); other failures are
//! recorded on the run and the stages keep exchanging so no rank is left waiting.
class program {
 public:
  virtual ~program() = default;
  [[nodiscard]] virtual int exchanges() const noexcept = 0;
  virtual status stage(run& r, int k, std::uint64_t seg, slot& s) = 0;
};

//! Runs every segment through every stage: one segment at a time, or (cfg.pipeline)
//! staggered so stage k of segment i runs right after stage k-1 of segment i+1 posted
//! (ascending k within a time step, so an encode overlaps the previous transfer).
status drive(run& r, program& p);

}  // namespace gradcodec::comm::detail
