// SPDX-License-Identifier: Apache-2.0
//! @file
//! The record of one allreduce call on this rank (its views, state, workspace and the
//! first failure), how failures travel as error words, and the encode of one frame.
#pragma once

#include <cstdint>
#include <span>

#include "comm/src/buffers.hpp"
#include "comm/src/chunks.hpp"
#include "gradcodec/codec.hpp"
#include "gradcodec/comm/allreduce.hpp"

namespace gradcodec::comm::detail {

struct run {
  communicator& comm;
  const allreduce_config& cfg;
  strategy how;
  context ctx;
  const_tensor_view in;
  tensor_view out;
  allreduce_state& st;
  workspace::impl& ws;
  phase_times* times;
  memory_ops& mem;  // where the communicator's buffers live (and in, out and the state)
  int world = 1, me = 0;
  int reported_rank = 0;  // the rank error words name (the world rank in a hierarchy)
  int mean_over = 1;      // W for the mean, 1 for the sum
  float alpha = 1.0f;     // 1 / mean_over: weight of each rank's contribution in accumulations
  float divisor = 1.0f;   // dense casts: inputs are divided by this before encoding
  bool error_feedback = true;
  std::uint64_t unit = 1, seg_len = 0, segments = 0;
  std::span<const tensor_slot> pieces{};  // when set, segment i is pieces[i]
  // The state's arrays, wherever they live (set once the state is ready).
  float* worker_residual = nullptr;
  float* server_residual = nullptr;
  float* q = nullptr;

  status local{};            // the first failure on this rank
  std::uint64_t poison = 0;  // error word of the lowest failing rank seen (0 = none)

  [[nodiscard]] bool failed() const noexcept { return poison != 0; }
  //! Records a failure on this rank; it travels in the next block headers.
  void fail(const status& s);
  //! Records an error word received from another rank.
  void note(std::uint64_t word) noexcept;
  [[nodiscard]] segment seg(std::uint64_t i) const noexcept;
  [[nodiscard]] exec_options exec(std::span<std::byte> scratch) const noexcept {
    return {mem.codec_backend(cfg.where), scratch, mem.stream(), cfg.threads};
  }
  //! The status the call returns once the collectives are done.
  [[nodiscard]] status outcome() const;
};

//! The largest rank an error word can name (read_block rejects words beyond it as garbage).
inline constexpr std::uint64_t max_rank = (std::uint64_t{1} << 31) - 1;
//! The error word of a failure: bit 63, the failing rank (bits 8..62), the status code.
std::uint64_t error_word(int rank, status_code code) noexcept;
//! comm_error naming the failing rank and its code (success for word 0).
status failure_status(std::uint64_t word);

//! Codec scratch for one operation, or a failure recorded on the run.
std::span<std::byte> codec_scratch(run& r, const codec_spec& spec, const_tensor_view shape,
                                   operation op);

//! Whether a frame starts 16-byte aligned (the CUDA kernels need it); a failure on the
//! run otherwise.
bool frame_aligned(run& r, const void* frame);

//! Encodes `in` into dst, with error feedback on `residual` when it has data (the worker's
//! or the server's residual). The frame's bytes; 0 with the failure recorded on the run.
std::uint64_t encode_frame(run& r, const context& fctx, const_tensor_view in, tensor_view residual,
                           mutable_bytes dst);

//! The context of a frame of this run (randomk frames share it across ranks).
context frame_context(const run& r, std::uint64_t role, std::uint64_t segment, std::uint64_t chunk);

}  // namespace gradcodec::comm::detail
