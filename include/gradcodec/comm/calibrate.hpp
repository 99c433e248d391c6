// SPDX-License-Identifier: Apache-2.0
//! @file
//! Calibration of the cost model (comm/cost_model.hpp): the codec costs of this machine,
//! the link between the ranks, their agreement (every value the slowest rank's), and the
//! profile's JSON form (`gradcodec calibrate` writes it, `gradcodec plan --profile` reads
//! it). docs/planner.md describes the measurements.
//!
//! Start-up probe, collectively on every rank:
//!
//!   comm::calibrate_options opt;
//!   opt.specs = {parse_spec("minmax:bits=4").value()};
//!   auto profile = comm::calibrate(comm, opt);   // measured, agreed: identical on all ranks
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "gradcodec/comm/communicator.hpp"
#include "gradcodec/comm/cost_model.hpp"

namespace gradcodec::comm {

struct calibrate_options {
  //! The codecs to measure; bf16 (the planner's dense candidate) is always added.
  std::vector<codec_spec> specs;
  //! The two element counts each operation is timed at (fixed cost and per-element cost
  //! are fitted through them).
  std::uint64_t small_elements = std::uint64_t{1} << 16;
  std::uint64_t large_elements = std::uint64_t{1} << 22;
  int threads = 1;                  //!< CPU backend threads per call
  double seconds_per_point = 0.05;  //!< time spent at least per measured point (≥ 3 runs)
  //! Link probe: bytes per block of the small and the large collectives.
  std::uint64_t small_bytes = 4096;
  std::uint64_t large_bytes = std::uint64_t{1} << 22;
  int link_repeats = 5;  //!< timed calls per collective and size (the median is kept)
  //! In-call factors (codec_costs::in_call): every codec with every strategy it supports,
  //! as a real allreduce of in_call_elements in segments of in_call_segment, one warm-up
  //! and in_call_repeats timed calls. 0 repeats, or one rank: none (the operation costs
  //! alone).
  std::uint64_t in_call_elements = std::uint64_t{1} << 22;
  std::uint64_t in_call_segment = std::uint64_t{1} << 20;
  int in_call_repeats = 2;
};

//! Times encode, encode_with_feedback, decode and decode_accumulate of every spec (and a
//! copy pass) on this rank, alone. Returns the fitted costs.
result<compute_profile> measure_compute(const calibrate_options& opt);

//! Collective: times allgather, alltoall and allreduce at the two block sizes and fits α and
//! β per kind; then times an allgather with a copy loop of the same length running during
//! it, for the overlap fraction. The result is this rank's view (see agree_profile).
result<link_profile> probe_link(communicator& comm, const calibrate_options& opt);

//! Collective: every number of the profile becomes its median over the ranks (for an even
//! count the upper of the middle two), so every rank holds the same profile afterwards and
//! one descheduled rank does not set it. comm_error on every rank when the ranks measured
//! different codec lists.
status agree_profile(communicator& comm, cost_profile& profile);

//! Collective: measure_compute on every rank at once (so shared cores count), probe_link,
//! agree_profile, then the in-call factors of every codec and strategy against that agreed
//! profile, agreed again. ranks is set to comm.size().
result<cost_profile> calibrate(communicator& comm, const calibrate_options& opt);

//! Collective over h.world, for hierarchical calls (predict_hierarchical): calibrate's
//! steps, with the link measured as two: the intra-node link by probe_link on every node,
//! and the link between the leaders by probe_link among them, which each leader
//! broadcasts to its node; both agreed over the world like every number. The in-call
//! factors come from flat calls over the world, against the leaders' link.
result<cost_profile> calibrate(const hierarchy& h, const calibrate_options& opt);

//! The profile as JSON (format "gradcodec-cost-profile", version 1; every number printed
//! so that it reads back to the same double).
std::string profile_to_json(const cost_profile& p);
//! Parses profile_to_json's output; invalid_argument naming what is wrong.
result<cost_profile> profile_from_json(std::string_view text);

}  // namespace gradcodec::comm
