// SPDX-License-Identifier: Apache-2.0
//! @file
//! The selection machinery of the sparse codecs on the GPU (topk, threshold, dgc), all
//! stream-ordered with its state in device memory:
//!
//! - a select_rule says which elements take part (candidates: non-finite or |v| >= tau;
//!   tau = 0 lets every element take part) and holds the radix state of
//!   blocks/radix_select.hpp;
//! - select_radix runs the three histogram passes that fix the threshold key T of the top m
//!   participants (kernels read m and tau from the rule, so a kernel may have set them);
//! - select_compact writes, in index order, every participant with key > T and the first
//!   need_equal with key == T: values (in the wire dtype) and indices of a sparse payload.
//! In "binary" mode (dgc's fallback) an element's key is 1 for a candidate and 0 otherwise,
//! every element takes part, and the same compaction sends all candidates plus the
//! lowest-index others.
#pragma once

#include "common.cuh"
#include "gradcodec/blocks/layout.hpp"
#include "gradcodec/blocks/radix_select.hpp"
#include "gradcodec/blocks/sparse.hpp"

namespace gradcodec::cuda {

using blocks::select_rule;

//! Where a sparse payload's values and indices go.
struct sparse_out {
  std::uint8_t* values;
  std::uint8_t* index;
  dtype wire;
  bool index64;
};

//! Sparse values and indices of a payload.
struct sparse_in {
  const std::uint8_t* values;
  const std::uint8_t* index;
  dtype type;
  bool index64;
  __device__ __forceinline__ std::uint64_t index_at(std::uint64_t j) const {
    return index64 ? reinterpret_cast<const std::uint64_t*>(index)[j]
                   : reinterpret_cast<const std::uint32_t*>(index)[j];
  }
  __device__ __forceinline__ float value_at(std::uint64_t j) const {
    if (type == dtype::f32) return reinterpret_cast<const float*>(values)[j];
    const std::uint16_t h = reinterpret_cast<const std::uint16_t*>(values)[j];
    return type == dtype::f16 ? blocks::f16_to_f32(h) : blocks::bf16_to_f32(h);
  }
};

inline sparse_out sparse_out_of(std::byte* payload, const blocks::sparse_layout& l, dtype wire,
                                bool index64) {
  auto* p = reinterpret_cast<std::uint8_t*>(payload);
  return {p + l.values_offset, p + l.index_offset, wire, index64};
}
inline sparse_in sparse_in_of(const std::byte* payload, const blocks::sparse_layout& l, dtype type,
                              bool index64) {
  const auto* p = reinterpret_cast<const std::uint8_t*>(payload);
  return {p + l.values_offset, p + l.index_offset, type, index64};
}

//! Scratch for one selection over n elements, carved from the workspace after the
//! status words: two rules (dgc selects over its sample first), a histogram, the tile
//! counts and their scans, the counts of up to four candidate thresholds, and f32 room
//! for `extra_floats` values (error feedback's p, dgc's sample).
struct select_space {
  select_rule* rule;
  select_rule* sample_rule;
  unsigned long long* hist;  //!< 64-bit: one bin may hold 2^32 keys or more
  std::uint64_t* counts;     //!< [4]
  std::uint32_t* tile_above;
  std::uint32_t* tile_equal;
  std::uint64_t* above_before;
  std::uint64_t* equal_before;
  float* floats;

  static std::size_t bytes(std::uint64_t n, std::uint64_t extra_floats);
  static select_space carve(mutable_bytes ws, std::uint64_t n);
};

//! The rule: candidates by tau (0: every element), the top m of them wanted.
status select_rule_init(select_rule* rule, float tau, std::uint64_t m, void* stream);
//! Fixes T and need_equal for the rule's m (no-op when the rule says skip).
status select_radix(const select_space& sp, select_rule* rule, values_in v, std::uint64_t n,
                    status_words* st, void* stream);
//! Writes the selection into `out`, in index order.
status select_compact(const select_space& sp, const select_rule* rule, values_in v, std::uint64_t n,
                      sparse_out out, void* stream);

//! How many elements are candidates for tau; also notes non-finite values. Waits for the
//! count (the frame size of threshold depends on it).
result<std::uint64_t> count_candidates(const select_space& sp, values_in v, std::uint64_t n,
                                       float tau, status_words* st, void* stream);

//! A sparse encode in progress: its selection space, and the values it selects from (with
//! a residual p = g + e, computed into the workspace: `p` then points there).
struct sparse_encode {
  select_space sp;
  values_in v;
  const float* p;
};
//! Checks the frame's alignment, clears the status words, carves the space, sums p.
result<sparse_encode> sparse_begin(const detail::encode_call& c, tensor_view residual);
//! Finishes a sparse encode whose rule (sp.rule) selects m elements: compaction, padding,
//! the residual, the header (count m, payload size).
status sparse_end(const detail::encode_call& c, const sparse_encode& e, std::uint64_t m,
                  tensor_view residual);
//! Workspace of a sparse codec: status words, and for an encode the selection space over n
//! elements with `extra_floats` more (plus n for error feedback's p).
std::size_t sparse_workspace(std::uint64_t n, operation op, std::uint64_t extra_floats);
//! output_too_small when a sparse payload of m elements does not fit the output.
inline status check_sparse_capacity(const detail::encode_call& c, std::uint64_t m) {
  const bool index64 = (c.hdr.flags & flag_index64) != 0;
  if (blocks::sparse_layout_of(m, dtype_size(c.wire), index64).total > c.capacity)
    return {status_code::output_too_small, "output buffer too small for the payload"};
  return {};
}

//! Error feedback of a sparse frame: residual = p - decoded (p everywhere, p - value at
//! the k sent indices).
status sparse_residual(const float* p, std::uint64_t n, sparse_in sent, std::uint64_t k,
                       tensor_view residual, void* stream);

//! Decode of topk, dgc and threshold frames: the indices are checked on the device and
//! the verdict awaited before anything is written.
status sparse_decode(const detail::decode_call& c);

}  // namespace gradcodec::cuda
