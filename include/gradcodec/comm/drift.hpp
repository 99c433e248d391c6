// SPDX-License-Identifier: Apache-2.0
//! @file
//! Planning again when calls drift from their predictions (docs/planner.md, "Drift"). The
//! caller times every call of a planned bucket and observes it; every so many steps all
//! ranks agree, in two collectives, on each bucket's ratio measured / predicted (the median
//! over the ranks); a bucket whose ratio leaves [1/limit, limit] has the profile entry its
//! choice was predicted from scaled by that ratio, and is planned again. Every rank computes
//! the same from the same gathered values, so the profiles and plans stay identical.
//!
//!   comm::drift_tracker drift;
//!   drift.observe(bucket, plan.choice(), seconds);         // after every call
//!   if (step % 100 == 0) {
//!     auto again = drift.agree(comm, profile);             // collective
//!     for (std::uint64_t b : again.value()) plans[b] = comm::plan(requests[b], profile);
//!   }
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <vector>

#include "gradcodec/comm/communicator.hpp"
#include "gradcodec/comm/cost_model.hpp"
#include "gradcodec/comm/plan.hpp"

namespace gradcodec::comm {

struct drift_options {
  double ewma = 0.2;    //!< weight of a new call in a bucket's running ratio, (0, 1]
  double limit = 1.25;  //!< re-plan when the agreed ratio leaves [1/limit, limit]; > 1
};

//! Scales what a candidate's prediction came from by `ratio` (measured / predicted): for
//! the uncompressed mean the link's allreduce rate (bytes_per_s / ratio); for a codec the
//! in-call compute factor of its strategy and pipelining (created at 1 when the profile has
//! none; the wait grows with it, being a share of the compute), kept within [1e-3, 1e3].
//! invalid_argument for a ratio that is not finite and positive, or a codec the profile has
//! no costs for.
status scale_for_drift(cost_profile& profile, const candidate& c, double ratio);

class drift_tracker {
 public:
  explicit drift_tracker(drift_options opt = {}) noexcept : opt_(opt) {}

  //! One timed call (this rank's) of bucket `key`, planned as `row`. When the bucket's row
  //! changed (planned again), its running values start over.
  void observe(std::uint64_t key, const plan_row& row, double seconds);

  //! Sets bucket `key`'s running values, as ratio() and seconds() gave them (a checkpoint's).
  void restore(std::uint64_t key, const plan_row& row, double ratio, double seconds);

  //! This rank's running ratio measured / predicted and running seconds of `key` (none
  //! before its first call).
  [[nodiscard]] std::optional<double> ratio(std::uint64_t key) const;
  [[nodiscard]] std::optional<double> seconds(std::uint64_t key) const;

  //! Collective: every rank's (key, ratio) pairs to every rank; for each key every rank has
  //! timed, in increasing order, the median ratio (the upper of the middle two for an even
  //! count). Keys outside [1/limit, limit] have their row's profile entry scaled
  //! (scale_for_drift) and are forgotten; they are returned, the same on every rank, to be
  //! planned again on the updated profile. invalid_argument for options out of range (on
  //! every rank, before any collective). Host buffers, as agree_profile: a communicator on
  //! host memory (threads, MPI, a Python transport).
  result<std::vector<std::uint64_t>> agree(communicator& comm, cost_profile& profile);

  //! Buckets planned again so far.
  [[nodiscard]] std::uint64_t replans() const noexcept { return replans_; }

 private:
  struct entry {
    candidate config;
    double ratio = 0;
    double seconds = 0;
  };
  drift_options opt_;
  std::map<std::uint64_t, entry> entries_;
  std::uint64_t replans_ = 0;
};

}  // namespace gradcodec::comm
