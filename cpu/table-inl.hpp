// SPDX-License-Identifier: Apache-2.0
//! @file
//! The body of one ISA variant of the CPU backend: the SIMD layer, every kernel family,
//! and the codec table. Included by table_<isa>.cpp inside namespace
//! gradcodec::cpu::<isa> and a target region, with GRADCODEC_CPU_LEVEL set.

// The SIMD layer first: every kernel family is written against it.
#include "simd-inl.hpp"

// Shared by several kernel families.
#include "kernels/bitpack-inl.hpp"
#include "kernels/philox-inl.hpp"
#include "kernels/staged-inl.hpp"

#include "kernels/block_scaled-inl.hpp"
#include "kernels/cast-inl.hpp"
#include "kernels/powersgd-inl.hpp"
#include "kernels/quant-inl.hpp"
#include "kernels/select-inl.hpp"
#include "kernels/sign-inl.hpp"
#include "kernels/sparse-inl.hpp"
#include "kernels/vote-inl.hpp"

const detail::backend_table* table() noexcept {
  // A codec without an entry here runs on the reference backend under backend::automatic
  // and reports backend_unavailable under backend::cpu.
  constexpr detail::codec_ops block_scaled{block_scaled_workspace, block_scaled_encode,
                                           block_scaled_decode, block_scaled_encode_feedback};
  static const detail::backend_table t{
      GRADCODEC_CPU_NAME,
      {
          {topk_workspace, topk_encode, topk_decode, topk_encode_feedback},
          {dgc_workspace, dgc_encode, dgc_decode, dgc_encode_feedback},
          {randomk_workspace, randomk_encode, randomk_decode, randomk_encode_feedback},
          {threshold_workspace, threshold_encode, threshold_decode, threshold_encode_feedback},
          {qsgd_workspace, qsgd_encode, qsgd_decode, qsgd_encode_feedback},
          {terngrad_workspace, terngrad_encode, terngrad_decode, terngrad_encode_feedback},
          {minmax_workspace, minmax_encode, minmax_decode, minmax_encode_feedback},
          {onebit_workspace, onebit_encode, onebit_decode, onebit_encode_feedback},
          {sign_workspace, sign_encode, sign_decode, sign_encode_feedback},
          {cast_workspace, cast_encode, cast_decode, cast_encode_feedback},
          {cast_workspace, cast_encode, cast_decode, cast_encode_feedback},
          {powersgd_workspace, powersgd_encode, powersgd_decode, powersgd_encode_feedback},
          block_scaled,
          block_scaled,
          block_scaled,
          block_scaled,
          block_scaled,
          block_scaled,
      }};
  return &t;
}
