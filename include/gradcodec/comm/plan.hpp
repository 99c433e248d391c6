// SPDX-License-Identifier: Apache-2.0
//! @file
//! The planner: every candidate configuration of one bucket predicted by the cost model
//! (comm/cost_model.hpp), the fastest chosen, and dense kept unless compression is
//! predicted to win by a margin. The plan depends only on its arguments, so ranks that
//! agreed on the profile (comm/calibrate.hpp, agree_profile) get the same plan.
//!
//!   comm::plan_request req;
//!   req.elements = n;
//!   req.ranks = comm.size();
//!   req.accept = {parse_spec("minmax:bits=4").value(), parse_spec("topk").value()};
//!   auto chosen = comm::plan(req, profile);   // rows, chosen, reason
//!   comm::allreduce_config cfg = chosen.value().config();
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "gradcodec/comm/allreduce.hpp"
#include "gradcodec/comm/cost_model.hpp"

namespace gradcodec::comm {

struct plan_request {
  std::uint64_t elements = 0;
  int ranks = 1;
  //! The codecs the caller accepts for fidelity. The uncompressed f32 mean and bf16 (dense)
  //! are always candidates.
  std::vector<codec_spec> accept;
  //! The bucket's tensors, as allreduce_config::tensors will hold them: PowerSGD's
  //! segments (empty: the bucket as one near-square matrix).
  std::vector<tensor_slot> tensors;
  //! Segment lengths tried (0: one segment); PowerSGD's segments are its tensors.
  std::vector<std::uint64_t> segments{0, std::uint64_t{1} << 18, std::uint64_t{1} << 20,
                                      std::uint64_t{1} << 22};
  bool try_pipelining = true;
  //! Unset: each codec's bounds decide (bounds(spec).feedback_safe), as allreduce does.
  std::optional<bool> error_feedback{};
  //! A codec is chosen over the best dense candidate only when predicted at least this
  //! fraction faster (guards against the model's error; docs/planner.md).
  double margin = 0.05;
  //! Every candidate's dense reductions by the transport's allreduce (candidate::
  //! transport_allreduce): the DDP hook's paths.
  bool transport_allreduce = false;
  //! (codec, strategy) pairs the caller cannot run, never candidates (the DDP hook has no
  //! two_phase for threshold's variable-size frames).
  std::vector<std::pair<codec_id, strategy>> excluded;
  //! Set: the calls are hierarchical (allreduce(hierarchy, ...)) over this layout, whose
  //! ranks multiply to `ranks`, predicted by predict_hierarchical on a profile with an
  //! intra-node link; the candidates are the leaders' configurations.
  std::optional<node_layout> nodes;
};

struct plan_row {
  candidate config;
  prediction predicted;
};

struct plan_result {
  std::vector<plan_row> rows;  //!< every candidate, fastest first (ties: generation order)
  std::size_t chosen = 0;      //!< index into rows
  std::size_t best_dense = 0;  //!< index of the fastest dense candidate
  std::string reason;          //!< one line: what was chosen and why

  [[nodiscard]] const plan_row& choice() const { return rows[chosen]; }
  //! The chosen candidate as an allreduce configuration (other fields at their defaults).
  [[nodiscard]] allreduce_config config() const;
};

//! Whether a candidate is one of the dense ones the margin protects: the uncompressed mean
//! or bf16 with the dense strategy.
bool is_dense(const candidate& c) noexcept;

//! A candidate as an allreduce configuration (the other fields at their defaults).
allreduce_config config_of(const candidate& c);

//! Plans one bucket. invalid_argument for a bad request, invalid_argument (naming the spec) when
//! the profile lacks the costs of an accepted codec or of bf16.
result<plan_result> plan(const plan_request& req, const cost_profile& profile);

//! A candidate in one line: "uncompressed" or "SPEC strategy segment=N pipeline=on ef=off".
std::string describe(const candidate& c);

}  // namespace gradcodec::comm
