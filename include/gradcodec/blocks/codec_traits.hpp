// SPDX-License-Identifier: Apache-2.0
//! @file
//! The facts about each codec that the layers ask for (frame checks, the expected-header
//! check, the strategies, the benchmarks, the Python hook), in one place instead of a list
//! of "special" codecs in each of them. Host and device.
#pragma once

#include "gradcodec/blocks/config.hpp"
#include "gradcodec/format.hpp"

namespace gradcodec::blocks {

struct codec_traits {
  //! Sends a subset of the elements, unchanged (top-k, DGC, random-k, threshold): the
  //! header's count is how many.
  bool selects = false;
  //! Its frames carry the selected elements' indices (random-k's follow from the seed).
  bool indexed = false;
  //! The header's count depends on the data, not only on the spec and n (threshold; DGC,
  //! whose sampled threshold may find fewer than k).
  bool count_from_data = false;
  //! The frame's size depends on the data, so ranks' frames differ in size (threshold).
  bool size_from_data = false;
  //! Scales per bucket of `bucket` elements (block-scaled codecs: per block; fp8row: per
  //! row), in the header's group field.
  bool bucketed = false;
  //! Compresses a matrix: its factors' shapes follow the row count, in the header's count
  //! (PowerSGD).
  bool matrix = false;
  //! The tensor's row count shapes the frame (PowerSGD; fp8row, one scale per row).
  bool by_rows = false;
  //! Rounds to a grid, nearest or stochastic (spec `rounding`, header mode bit 0), with the
  //! header's level saying which grid (qsgd, minmax, the block-scaled codecs).
  bool rounds = false;
  //! A block-scaled codec (blocks/block_scaled.hpp): low-precision elements, one scale per
  //! block, header level = element format.
  bool block_scaled = false;
};

GRADCODEC_HD constexpr codec_traits traits_of(codec_id c) {
  codec_traits t;
  switch (c) {
    case codec_id::threshold: t.size_from_data = true; [[fallthrough]];
    case codec_id::dgc: t.count_from_data = true; [[fallthrough]];
    case codec_id::topk:
      t.indexed = true;
      t.selects = true;
      break;
    case codec_id::randomk: t.selects = true; break;
    case codec_id::qsgd:
    case codec_id::minmax:
      t.rounds = true;
      t.bucketed = true;
      break;
    case codec_id::terngrad:
    case codec_id::onebit:
    case codec_id::sign:
      t.bucketed = true;
      break;
    GRADCODEC_CASE_BLOCK_SCALED:
      t.bucketed = true;
      t.rounds = true;
      t.block_scaled = true;
      t.by_rows = c == codec_id::fp8row;
      break;
    case codec_id::powersgd:
      t.matrix = true;
      t.by_rows = true;
      break;
    case codec_id::fp16:
    case codec_id::bf16: break;
  }
  return t;
}

}  // namespace gradcodec::blocks
