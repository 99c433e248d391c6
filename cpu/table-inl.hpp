// SPDX-License-Identifier: Apache-2.0
//! @file
//! The codec table of one ISA variant, from the rows its families' translation units
//! define (cpu/ops-inl.hpp). Included inside namespace gradcodec::cpu::<isa> with
//! GRADCODEC_CPU_NAME set (cpu/variant.cpp.in).

#include "ops-inl.hpp"

const detail::backend_table* table() noexcept {
  // A codec without an entry here runs on the reference backend under backend::automatic
  // and reports backend_unavailable under backend::cpu.
  static const detail::backend_table t{
      GRADCODEC_CPU_NAME,
      {topk_ops, dgc_ops, randomk_ops, threshold_ops, qsgd_ops, terngrad_ops, minmax_ops,
       onebit_ops, sign_ops, cast_ops, cast_ops, powersgd_ops, block_scaled_ops, block_scaled_ops,
       block_scaled_ops, block_scaled_ops, block_scaled_ops, block_scaled_ops},
      nullptr,
      nullptr,
      powersgd_phase_kernels(),
      vote_kernels()};
  return &t;
}
