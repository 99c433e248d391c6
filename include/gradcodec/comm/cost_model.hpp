// SPDX-License-Identifier: Apache-2.0
//! @file
//! The cost model of one compressed allreduce call: for a flat bucket of n elements, W
//! ranks, a link and the measured codec costs of this machine, the predicted seconds of a
//! candidate configuration (a codec spec, a strategy, pipelining, a segment length, or the
//! uncompressed f32 mean). docs/planner.md writes down every formula and where each term
//! comes from; comm/plan.hpp chooses among candidates with it, comm/calibrate.hpp measures
//! the profile it reads.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "gradcodec/comm/bucket.hpp"
#include "gradcodec/comm/strategy.hpp"
#include "gradcodec/spec.hpp"
#include "gradcodec/status.hpp"

namespace gradcodec::comm {

//! One collective kind over the link: a call in which this rank sends `sent` bytes to the
//! others in `steps` rounds takes steps * step_latency_s + sent / bytes_per_s seconds.
//! Calibrated per kind, since transports reach different fractions of the line rate with
//! different collectives.
struct collective_cost {
  double step_latency_s = 50e-6;  //!< α per round
  double bytes_per_s = 1.25e8;    //!< β: bytes a rank sends per second
};

//! The link between the ranks of a flat (single-level) communicator.
struct link_profile {
  collective_cost allgather;  //!< W − 1 rounds, (W − 1) × block sent
  collective_cost alltoall;   //!< W − 1 rounds, the blocks for the others sent
  collective_cost allreduce;  //!< ring: 2(W − 1) rounds, 2(W − 1)/W × the buffer sent
  //! The fraction of min(compute, transfer) past the first segment that pipelining hides
  //! (0: the transport progresses only inside its own calls; 1: perfect overlap).
  double overlap = 0;
  //! Bytes a rank can send at once after being idle (a traffic shaper's bucket, a switch
  //! or NIC buffer): a collective that follows g seconds of computation sends its first
  //! min(burst_bytes, g × β) bytes without waiting for the rate.
  double burst_bytes = 0;

  //! Every kind with the same α and β (a link given by its rate and latency).
  static link_profile uniform(double step_latency_s, double bytes_per_s, double overlap = 0,
                              double burst_bytes = 0) noexcept;
};

//! Seconds of one operation on m elements: fixed_s + m × per_element_s.
struct op_cost {
  double fixed_s = 0;
  double per_element_s = 0;
  [[nodiscard]] double at(std::uint64_t m) const noexcept {
    return fixed_s + static_cast<double>(m) * per_element_s;
  }
};

//! How a real call of one strategy departed from the model built on the codec's own
//! costs, measured by calibration inside allreduce calls on the job's link. It carries
//! what the operation costs leave out: the network stack's and the other ranks' use of
//! shared cores, the strategy's own passes (the casts' division by W), cache effects of
//! the segment size, ranks waiting for each other.
struct in_call_factor {
  strategy how = strategy::allgather;
  bool pipeline = false;
  //! Measured compute / predicted compute.
  double compute = 1;
  //! (Measured time inside collectives − predicted transfer) / measured compute: the
  //! waiting for other ranks grows with what they compute; negative where the link did
  //! better than predicted.
  double wait = 0;
};

//! What one codec spec costs on this machine, f32 input, the rank's own threads, measured
//! while every rank of the job ran the same (so a shared core is in the numbers).
struct codec_costs {
  codec_spec spec;
  op_cost encode, encode_with_feedback, decode, decode_accumulate;
  //! Mean frame bytes per element seen at calibration, for the codecs whose frame size
  //! depends on the data (threshold); 0 for the others, whose size is encode_bound's.
  double frame_bytes_per_element = 0;
  //! Per strategy the codec supports, pipelining off and on (none: the operation costs
  //! alone).
  std::vector<in_call_factor> in_call;

  //! The factors of a strategy with or without pipelining, or null.
  [[nodiscard]] const in_call_factor* factor(strategy how, bool pipeline) const noexcept;
};

//! The machine's side of the model.
struct compute_profile {
  //! A pass reading one f32 array and writing another (the final store, the f32
  //! accumulation of the uncompressed mean, a ring reduction's adds).
  op_cost copy{0, 2.5e-10};
  std::vector<codec_costs> codecs;

  //! The costs measured for exactly this spec, or null.
  [[nodiscard]] const codec_costs* find(const codec_spec& spec) const noexcept;
};

struct cost_profile {
  //! The link between the ranks; with `intra`, the link between the nodes' leaders.
  link_profile link;
  compute_profile compute;
  int ranks = 0;  //!< the job size it was calibrated with (0: given by hand)
  //! The link between the ranks of one node, for hierarchical calls (comm::hierarchy).
  std::optional<link_profile> intra;
};

//! The ranks of a two-level job (comm::hierarchy, docs/comm.md §9): `nodes` nodes of
//! `per_node` ranks each.
struct node_layout {
  int nodes = 1;
  int per_node = 1;
};

//! One configuration the planner can choose: the uncompressed f32 mean
//! (allreduce_config::uncompressed), or a codec with a strategy.
struct candidate {
  bool uncompressed = false;
  codec_spec spec = make_spec(codec_id::bf16);
  strategy how = strategy::dense;  //!< resolved (never automatic)
  bool pipeline = false;
  std::uint64_t segment_elements = 0;  //!< 0: one segment
  bool error_feedback = true;
  //! The dense reductions (the uncompressed mean, the casts' and random-k's values,
  //! PowerSGD's factors) by the transport's own ring allreduce, as the DDP hook runs them,
  //! instead of gradcodec's rank-ordered reduce-scatter and allgather.
  bool transport_allreduce = false;

  friend bool operator==(const candidate&, const candidate&) = default;
};

//! What a candidate is predicted to cost per call, per rank.
struct prediction {
  double total_s = 0;
  double compute_s = 0;          //!< encodes, decodes, accumulations, stores
  double transfer_s = 0;         //!< inside collectives (the configuration check included)
  double hidden_s = 0;           //!< taken off compute + transfer by pipelining
  std::uint64_t wire_bytes = 0;  //!< what this rank sends to the others
  std::uint64_t collectives = 0;
};

//! The prediction for one call on n f32 elements over `ranks` ranks; the codec's
//! in_call factor for the strategy, when the profile has one, scales the compute and adds
//! its wait × compute to the transfer (never below the configuration check).
//! predict_uncorrected leaves them out. `tensors` are the call's allreduce_config::tensors:
//! PowerSGD factorises each and sends the gaps between them as vectors (empty: the whole
//! buffer as one near-square matrix, powersgd_square_rows(n)); other codecs ignore them.
//! invalid_argument for a strategy the codec does not support, and invalid_argument
//! (naming the spec) when the profile has no costs for a codec candidate's spec.
result<prediction> predict(const candidate& c, std::uint64_t n, int ranks, const cost_profile& p,
                           std::span<const tensor_slot> tensors = {});
result<prediction> predict_uncorrected(const candidate& c, std::uint64_t n, int ranks,
                                       const cost_profile& p,
                                       std::span<const tensor_slot> tensors = {});

//! The prediction for one hierarchical call (allreduce(hierarchy, ...)) on n f32 elements,
//! the leader's, whose path is the longest: the world's configuration check over `link`,
//! the node's dense reduction to its leader over `intra`, the candidate's call among the
//! leaders over `link` (predict with nodes ranks, its own check left out), and the
//! broadcasts of the outcome word and the result over `intra`. invalid_argument without
//! `intra`, or for a layout with fewer than one node or rank per node.
result<prediction> predict_hierarchical(const candidate& c, std::uint64_t n, node_layout layout,
                                        const cost_profile& p,
                                        std::span<const tensor_slot> tensors = {});

//! Rounds and bytes of one collective (exposed for the tests and the docs' examples).
double allgather_seconds(const link_profile& l, int ranks, std::uint64_t block_bytes) noexcept;
double alltoall_seconds(const link_profile& l, int ranks, std::uint64_t block_bytes) noexcept;
double ring_allreduce_seconds(const link_profile& l, int ranks, std::uint64_t bytes) noexcept;

}  // namespace gradcodec::comm
