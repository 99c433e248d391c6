// SPDX-License-Identifier: Apache-2.0
//! @file
//! The error-feedback state of a compressed allreduce, owned by the caller: one per rank
//! and per flat buffer. allreduce() sizes it on first use, checks on every call that it
//! belongs to the call's configuration, and updates it in place. save_state/load_state
//! give it a checksummed byte form for checkpoints (docs/comm.md, "State format").
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "gradcodec/status.hpp"
#include "gradcodec/views.hpp"

namespace gradcodec::comm {

//! What a rank does in the calls the state belongs to.
enum class state_role : std::uint8_t {
  none = 0,    //!< not initialized yet
  flat = 1,    //!< a rank of a flat (non-hierarchical) allreduce
  leader = 2,  //!< a node leader of a hierarchical allreduce (runs the compressed stage)
  member = 3,  //!< a non-leader of a hierarchical allreduce (holds no residuals)
};

//! The arrays of a state kept in device memory (defined by the library).
struct device_arrays;

struct allreduce_state {
  state_role role = state_role::none;
  //! Hash of the configuration (codec spec, strategy, n, segment length, options, tensor
  //! layout) the state was made for; a call with another configuration is refused.
  std::uint64_t fingerprint = 0;
  std::uint32_t world = 0;  //!< ranks of the compressed stage (the inter-node count for leaders)
  std::uint32_t rank = 0;   //!< this rank's place in that stage
  std::uint64_t steps = 0;  //!< completed calls; ranks must agree on it
  bool q_ready = false;     //!< powersgd: q holds the previous step's factors (warm start)
  std::vector<float> worker_residual;  //!< n values (error feedback of this rank's input)
  std::vector<float> server_residual;  //!< two_phase: this rank's chunk of every segment
  std::vector<float> q;                //!< powersgd: Q (cols x r) of each factorised tensor
  //! Set while the three arrays live in device memory: calls over a device communicator
  //! (NCCL) keep them on its GPU, and the vectors above are empty meanwhile. save_state()
  //! copies them back; a host call moves them back into the vectors, a device call moves
  //! host vectors (a loaded checkpoint) onto the GPU. Copies of a state share this.
  std::shared_ptr<device_arrays> device;

  [[nodiscard]] bool initialized() const noexcept { return role != state_role::none; }
  //! Forgets everything (the next call re-creates zero residuals).
  void reset() { *this = allreduce_state{}; }
};

//! Floats in each array, wherever they live.
struct state_lengths {
  std::uint64_t worker = 0, server = 0, q = 0;
};
state_lengths lengths_of(const allreduce_state& s) noexcept;

//! Bytes save_state() writes for this state.
std::uint64_t state_bytes(const allreduce_state& s) noexcept;

//! Writes the state's byte form; returns the bytes written. A device-resident state is
//! copied back first (after all work queued on its GPU).
result<std::size_t> save_state(const allreduce_state& s, mutable_bytes out) noexcept;

//! Reads a byte form written by save_state, checking magic, version, lengths and CRC-32C
//! before touching `out`.
status load_state(const_bytes in, allreduce_state& out);

}  // namespace gradcodec::comm
