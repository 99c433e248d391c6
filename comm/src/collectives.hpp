// SPDX-License-Identifier: Apache-2.0
//! @file
//! Collectives as a strategy runs them: timed into phase_times, and counted.
#pragma once

#include <chrono>
#include <cstdint>

#include "comm/src/run.hpp"

namespace gradcodec::comm::detail {

class timer {
 public:
  explicit timer(phase_times* t, double phase_times::*field) : t_(t), field_(field) {
    if (t_) start_ = std::chrono::steady_clock::now();
  }
  ~timer() {
    if (t_)
      t_->*field_ +=
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  }
  timer(const timer&) = delete;
  timer& operator=(const timer&) = delete;

 private:
  phase_times* t_;
  double phase_times::*field_;
  std::chrono::steady_clock::time_point start_{};
};

void count_traffic(run& r, std::uint64_t sent, std::uint64_t received);
status wait(run& r, request& req);

}  // namespace gradcodec::comm::detail
