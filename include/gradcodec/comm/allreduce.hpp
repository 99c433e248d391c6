// SPDX-License-Identifier: Apache-2.0
//! @file
//! Compressed allreduce of a flat gradient, written once against comm::communicator.
//! Each rank passes its gradient; every rank ends with the same bytes: the mean over ranks
//! (or the sum) of what the codec lets through, bit-identical on every rank and equal to
//! the thread_communicator simulation of the same call. docs/comm.md defines every step,
//! where the 1/W is applied, the chunking, the derived random contexts, and the state.
//!
//! Typical use, once per step and flat buffer:
//!
//!   comm::allreduce_config cfg;
//!   cfg.spec = gradcodec::parse_spec("qsgd:levels=7").value();
//!   comm::allreduce_state state;   // caller-owned, checkpointable
//!   comm::workspace ws;            // grows on first use, reused afterwards
//!   auto st = comm::allreduce(comm, cfg, {seed, step, 0}, view(grad), view(grad), state, ws);
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>

#include "gradcodec/codec.hpp"
#include "gradcodec/comm/bucket.hpp"
#include "gradcodec/comm/communicator.hpp"
#include "gradcodec/comm/state.hpp"
#include "gradcodec/comm/strategy.hpp"
#include "gradcodec/context.hpp"
#include "gradcodec/spec.hpp"

namespace gradcodec::comm {

//! What to run. Every field except `where` and `threads` must be equal on all ranks (the
//! call checks it, see check_config).
struct allreduce_config {
  codec_spec spec = make_spec(codec_id::fp16);
  strategy how = strategy::automatic;
  //! No codec: the f32 mean (or sum) of the inputs by the deterministic dense reduction
  //! (a reduce-scatter whose owners add the sources in rank order, then an allgather: the
  //! bytes of a ring allreduce, bit-identical on every rank). spec, how and error_feedback
  //! are then ignored; no residuals are kept.
  bool uncompressed = false;
  bool average = true;  //!< the mean over ranks (else the sum)
  //! Keep residuals in the state (worker side, and server side for two_phase). Unset: on
  //! where the codec's error is a contraction, bounds(spec).feedback_safe, off where feeding
  //! it back can amplify it (QSGD with the L2 norm, TernGrad, unbiased random-k, unscaled
  //! sign); see resolved_error_feedback().
  std::optional<bool> error_feedback{};
  //! Split the flat buffer into segments of this many elements (rounded up to a whole
  //! number of codec buckets); each segment is its own set of frames. 0: one segment.
  std::uint64_t segment_elements = 0;
  //! Overlap the encode of segment i+1 with the transfer of segment i (non-blocking
  //! collectives). The bytes and results are identical either way.
  bool pipeline = false;
  //! Start every call with one small allreduce that checks all ranks agree on this
  //! configuration, the element count, the context and the state (see docs/comm.md).
  //! Without it, a disagreement or a rank-local argument error can hang the job.
  bool check_config = true;
  backend where = backend::automatic;  //!< codec backend (host memory; device memory: cuda)
  int threads = 0;                     //!< CPU backend threads; 0 = library default
  //! The tensors of the flat buffer (see bucket.hpp); PowerSGD factorises each slot with
  //! rows > 0. Empty: one tensor covering the buffer, shaped by the input view's rows.
  //! Not owned: it must outlive the call.
  std::span<const tensor_slot> tensors{};
};

//! Whether a call with this configuration keeps residuals: cfg.error_feedback when set,
//! else bounds(cfg.spec).feedback_safe.
[[nodiscard]] bool resolved_error_feedback(const allreduce_config& cfg) noexcept;

//! Where a call spent its time (seconds, wall clock) and what it moved; every field is
//! added to, so a benchmark can accumulate steps. Bytes count what this rank handed to
//! and received from the communicator, block headers included.
struct phase_times {
  double agree_s = 0;   //!< the configuration check
  double encode_s = 0;  //!< worker-side encodes (PowerSGD: P = M Q and Q = M^T P)
  double reduce_s = 0;  //!< decode-accumulate of received frames, sums, server re-encodes
  double decode_s = 0;  //!< the final decode into the output
  double comm_s = 0;    //!< inside blocking collectives and waits
  std::uint64_t bytes_sent = 0;
  std::uint64_t bytes_received = 0;
  std::uint64_t collectives = 0;

  //! Adds every field of `o` (accumulating the steps of a loop).
  phase_times& operator+=(const phase_times& o) noexcept {
    agree_s += o.agree_s;
    encode_s += o.encode_s;
    reduce_s += o.reduce_s;
    decode_s += o.decode_s;
    comm_s += o.comm_s;
    bytes_sent += o.bytes_sent;
    bytes_received += o.bytes_received;
    collectives += o.collectives;
    return *this;
  }
};

//! Scratch of the allreduce calls: send and receive buffers, accumulators, codec
//! workspace. It grows when a call needs more and is reused afterwards, so a steady
//! training loop allocates nothing after its first step. Not shared between threads.
class workspace {
 public:
  workspace();
  ~workspace();
  workspace(workspace&&) noexcept;
  workspace& operator=(workspace&&) noexcept;
  workspace(const workspace&) = delete;
  workspace& operator=(const workspace&) = delete;

  //! Bytes held now.
  [[nodiscard]] std::size_t bytes() const noexcept;
  //! Frees everything (the next call grows it again).
  void release() noexcept;

  struct impl;
  impl& get() noexcept { return *impl_; }

 private:
  std::unique_ptr<impl> impl_;
};

//! Compressed allreduce over `comm`. `in` is this rank's gradient, `out` receives the
//! result (same n; any dtype each; out may be the same memory as in, not a partial
//! overlap), both in the communicator's memory: device memory of its GPU for NCCL, where
//! everything runs on its stream and the call returns with the last decode queued. On error every
//! rank returns a status (the same one for configuration disagreements: comm_error naming the
//! field), and out and state are unspecified.
status allreduce(communicator& comm, const allreduce_config& cfg, const context& ctx,
                 const_tensor_view in, tensor_view out, allreduce_state& state, workspace& ws,
                 phase_times* times = nullptr);

//! Hierarchical form: the gradients of each node are summed uncompressed inside the node
//! (h.intra), the node leaders run the compressed allreduce among themselves (h.inter),
//! and each leader broadcasts the result to its node. The configuration check runs over
//! h.world.
status allreduce(const hierarchy& h, const allreduce_config& cfg, const context& ctx,
                 const_tensor_view in, tensor_view out, allreduce_state& state, workspace& ws,
                 phase_times* times = nullptr);

//! Bucketed form: packs the tensors (in place: each is input and output) into one flat
//! f32 buffer held in the workspace, runs allreduce with cfg.tensors set to their slots,
//! and unpacks the result. The state belongs to this list of tensors.
status allreduce_tensors(communicator& comm, const allreduce_config& cfg, const context& ctx,
                         std::span<const tensor_view> tensors, allreduce_state& state,
                         workspace& ws, phase_times* times = nullptr);

}  // namespace gradcodec::comm
