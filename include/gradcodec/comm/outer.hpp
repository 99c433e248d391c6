// SPDX-License-Identifier: Apache-2.0
//! @file
//! The outer synchronizer: local SGD, DiLoCo and Streaming DiLoCo over comm::allreduce.
//! Every rank trains its own copy θ_local of the model with its inner optimizer and calls
//! outer_step() after every inner step. Every H steps (per fragment, staggered) the call
//! takes the pseudo-gradient Δ = θ_global − θ_local of the fragment due, reduces it with
//! any codec (error feedback in the fragment's allreduce_state) or uncompressed, applies
//! the outer optimizer in f32 to θ_global and writes θ_global into θ_local. docs/outer.md
//! gives the formulas, the order of operations, the fragment, mixing and participation
//! rules, and the state format.
//!
//!   comm::outer_config cfg;                 // equal on every rank (checked on every sync)
//!   cfg.reduce.spec = parse_spec("minmax:bits=4").value();
//!   cfg.sync_every = 50; cfg.lr = 0.7f; cfg.momentum = 0.9f; cfg.nesterov = true;
//!   comm::outer_state state;                // caller-owned, checkpointable
//!   comm::outer_workspace ws;
//!   outer_init(comm, cfg, view(params), state);           // rank 0's parameters everywhere
//!   for (...) { inner_step(params); outer_step(comm, cfg, view(params), state, ws); }
//!
//! θ_global is bit-identical on every rank after every call: every rank applies the same
//! f32 operations, in the same order, to the reduced Δ, which comm::allreduce makes
//! bit-identical. Host memory (the thread and MPI communicators) only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "gradcodec/comm/allreduce.hpp"
#include "gradcodec/comm/communicator.hpp"
#include "gradcodec/comm/state.hpp"
#include "gradcodec/status.hpp"
#include "gradcodec/views.hpp"

namespace gradcodec::comm {

struct outer_config {
  //! How Δ travels: codec, strategy, error feedback (unset: the codec's bounds decide),
  //! or `uncompressed` for the exact f32 mean. `tensors` are the model's tensors in the
  //! flat buffer: fragments are made of them. `average` must stay true.
  allreduce_config reduce{};
  std::uint32_t sync_every = 1;  //!< H: inner steps between two syncs of a fragment
  //! P: the tensors in order each join the fragment with the fewest elements so far (the
  //! lowest on ties): i mod P for tensors of equal size, strided over the layers, and
  //! balanced for unequal ones; the p-th of P equal ranges when `reduce.tensors` is
  //! empty. Fragment p is sent at the steps t with t mod H = ((p + 1)·H / P) mod H.
  //! 1 ≤ P ≤ H.
  std::uint32_t fragments = 1;
  //! τ: a sync sent after step t is applied after step t + τ, the reduction overlapping the
  //! τ inner steps between (it runs on a thread of the workspace). 0 ≤ τ ≤ H / P.
  std::uint32_t delay = 0;
  //! For τ > 0, what the late result does to θ_local: θ_local ← θ_global + α·(θ_local −
  //! θ_global), i.e. α·θ_local + (1 − α)·θ_global (Streaming DiLoCo's merge). With τ = 0
  //! θ_local ← θ_global.
  float mix = 0.5f;
  float lr = 1.0f;        //!< outer learning rate
  float momentum = 0.0f;  //!< outer momentum μ (0: plain SGD on Δ, no momentum array)
  bool nesterov = false;  //!< Nesterov's form of the momentum step
  //! K: ranks whose Δ counts in each sync, drawn from the counter RNG keyed by (seed,
  //! round), the reduced mean rescaled by W/K; 0 = every rank.
  std::uint32_t participants = 0;
  std::uint64_t seed = 0;  //!< participation draw, and the seed of the codec contexts
};

//! The caller-owned outer state of one rank: saved and loaded whole.
struct outer_state {
  std::uint64_t step = 0;         //!< inner steps completed (outer_step calls)
  std::uint64_t rounds = 0;       //!< syncs sent so far, every fragment counted
  std::uint64_t fingerprint = 0;  //!< of the configuration and element count
  //! The schedule outer_init agreed on: the steps a sync happens at come from here, so a
  //! rank given another configuration later still meets the others at the same syncs,
  //! where the agreement reports the difference.
  std::uint32_t sync_every = 0, fragments = 0, delay = 0;
  std::vector<float> global;            //!< θ_global, n values
  std::vector<float> momentum;          //!< n values when cfg.momentum != 0
  std::vector<allreduce_state> reduce;  //!< one per fragment (its residuals)
  //! A sent sync not applied yet (τ > 0): its fragment (-1: none), the step after which
  //! it is applied, and, once it has been settled, the reduced Δ of the fragment.
  std::int64_t pending_fragment = -1;
  std::uint64_t pending_step = 0;
  bool pending_ready = false;
  std::vector<float> pending;

  [[nodiscard]] bool initialized() const noexcept { return fingerprint != 0; }
};

//! Scratch of the outer calls, and the reduction in flight while τ > 0. Not copyable;
//! destroying it waits for that reduction.
class outer_workspace {
 public:
  outer_workspace();
  ~outer_workspace();
  outer_workspace(outer_workspace&&) noexcept;
  outer_workspace& operator=(outer_workspace&&) noexcept;
  outer_workspace(const outer_workspace&) = delete;
  outer_workspace& operator=(const outer_workspace&) = delete;

  //! Traffic and times of every reduction so far (the outer agreement included).
  [[nodiscard]] const phase_times& times() const noexcept;
  //! Bytes this rank sent for the last completed sync (its agreement included).
  [[nodiscard]] std::uint64_t last_sync_bytes() const noexcept;
  //! Seconds (wall clock, summed over the completed syncs) that the syncs' agreements and
  //! reductions took, and the part of them the caller waited for inside outer_step or
  //! outer_settle: all of it with τ = 0, the agreement and the wait for the thread with
  //! τ > 0. exposed / total is the share of the communication that was not hidden.
  [[nodiscard]] double sync_seconds() const noexcept;
  [[nodiscard]] double exposed_seconds() const noexcept;

  struct impl;
  impl& get() noexcept { return *impl_; }

 private:
  std::unique_ptr<impl> impl_;
};

//! The tensors (as [offset, offset + n) ranges of the flat buffer) of fragment p.
std::vector<tensor_slot> outer_fragment(const outer_config& cfg, std::uint64_t n, std::uint32_t p);

//! The fragment sent after step t (1 = after the first inner step) with H = sync_every
//! and P = fragments, or -1.
std::int64_t outer_fragment_due(std::uint32_t sync_every, std::uint32_t fragments,
                                std::uint64_t t) noexcept;

//! Whether `rank` of `world` contributes to sync `round` (K of W drawn without
//! replacement from the counter RNG keyed by (seed, round)).
bool outer_participates(const outer_config& cfg, int world, int rank, std::uint64_t round) noexcept;

//! Collective: checks the configuration on every rank, copies rank 0's `local` into every
//! rank's `local` (so all start from the same model) and makes a fresh state with
//! θ_global = local. `local` is f32 in host memory.
status outer_init(communicator& comm, const outer_config& cfg, tensor_view local,
                  outer_state& state);

//! Collective: after inner step state.step + 1. Applies the pending sync when due, then
//! sends the fragment due (blocking when τ = 0). On a sync, every rank first agrees on the
//! configuration, the step and round counters and whether its Δ is finite: a
//! disagreement is comm_error and a non-finite Δ on any rank is nonfinite_input on every
//! rank, with θ_global, θ_local and the state untouched. With τ > 0 the agreement runs
//! with the reduction on the workspace's thread, and its outcome is returned by the call
//! that would apply the sync (the sync is then dropped).
status outer_step(communicator& comm, const outer_config& cfg, tensor_view local,
                  outer_state& state, outer_workspace& ws);

//! The hierarchical form: `local` is the same on the ranks of a node (they average their
//! gradients every inner step, outer_node_mean), the compressed reduction runs between
//! the node leaders (comm::allreduce over the hierarchy).
status outer_step(const hierarchy& h, const outer_config& cfg, tensor_view local,
                  outer_state& state, outer_workspace& ws);

//! Collective over h.intra: `values` (f32, host) becomes the mean over the node's ranks,
//! added in rank order (the dense per-step reduction inside a node).
status outer_node_mean(const hierarchy& h, tensor_view values, outer_workspace& ws);

//! Waits for a reduction in flight and records its result in the state (pending_ready),
//! so that save_outer_state() can write it. outer_step() does this when the result is due.
status outer_settle(outer_state& state, outer_workspace& ws);

std::uint64_t outer_state_bytes(const outer_state& s) noexcept;
//! The state's checksummed byte form (docs/outer.md, "State format"). A state with a
//! reduction in flight is refused: settle it first.
result<std::size_t> save_outer_state(const outer_state& s, mutable_bytes out) noexcept;
status load_outer_state(const_bytes in, outer_state& out);

}  // namespace gradcodec::comm
