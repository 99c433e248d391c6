// SPDX-License-Identifier: Apache-2.0
//! @file
//! The workspace a caller keeps across calls: what every call uses, then each owner's own
//! buffers (the dense reduction's, the majority vote's, dense PowerSGD's, the hierarchy's
//! and allreduce_tensors'), so a strategy's buffers are named by the strategy that uses
//! them and no two users share a scratch vector.
#pragma once

#include <memory>
#include <vector>

#include "comm/src/buffers.hpp"
#include "comm/src/dense_reduce.hpp"
#include "comm/src/strategies/strategies.hpp"

namespace gradcodec::comm::detail {

//! A hierarchical call's own: the node's sum (then the result), the outcome word broadcast
//! in the node, a leader's copy of the node sum in the leaders' memory when it differs, and
//! the node level's buffers in that case (sharing them would reallocate on every call).
struct hierarchy_buffers {
  buffer node, node_word, staged;
  std::unique_ptr<workspace::impl> node_side;
};

//! allreduce_tensors' own: the packed bucket and its tensors' places in it.
struct tensors_buffers {
  buffer flat;
  std::vector<tensor_slot> slots;
};

}  // namespace gradcodec::comm::detail

namespace gradcodec::comm {

struct workspace::impl {
  // What every call uses.
  detail::buffer scratch;       // codec workspace (exec_options::workspace)
  detail::buffer accum;         // f32 accumulator of the chunk or segment being reduced
  detail::buffer prescaled;     // inputs in f32 (pre-divided for two-phase; uncompressed calls)
  detail::buffer words;         // the agreement's fields (the world's memory)
  detail::buffer verdicts;      // device decodes: one frame_verdict per frame
  std::vector<std::byte> host;  // host copies: block headers, vote frames and result
  std::vector<detail::slot> slots;
  std::vector<detail::frame_decode> decodes;  // the received frames a stage decodes
  std::vector<frame_header> decode_headers;   // ... and their headers, on device memory

  // Each owner's.
  detail::dense_reduce_buffers dense;
  detail::vote_buffers vote;
  detail::powersgd_dense_buffers powersgd;
  detail::hierarchy_buffers hierarchy;
  detail::tensors_buffers tensors;

  impl& node_level() {
    if (!hierarchy.node_side) hierarchy.node_side = std::make_unique<impl>();
    return *hierarchy.node_side;
  }

  [[nodiscard]] std::size_t bytes() const noexcept;
};

}  // namespace gradcodec::comm
