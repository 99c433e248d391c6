// SPDX-License-Identifier: Apache-2.0
//! @file
//! The body of one ISA variant of the CPU backend: the SIMD layer, every kernel family,
//! and the codec table. Included by table_<isa>.cpp inside namespace
//! gradcodec::cpu::<isa> and a target region, with GRADCODEC_CPU_LEVEL set.

// The SIMD layer first: every kernel family is written against it.
#include "simd-inl.hpp"

#include "kernels/cast-inl.hpp"

const detail::backend_table* table() noexcept {
  // A codec without an entry here runs on the reference backend under backend::automatic
  // and reports backend_unavailable under backend::cpu.
  static const detail::backend_table t{GRADCODEC_CPU_NAME,
                                       {
                                           {},  // topk
                                           {},  // dgc
                                           {},  // randomk
                                           {},  // threshold
                                           {},  // qsgd
                                           {},  // terngrad
                                           {},  // minmax
                                           {},  // onebit
                                           {},  // sign
                                           {cast_workspace, cast_encode, cast_decode, nullptr},
                                           {cast_workspace, cast_encode, cast_decode, nullptr},
                                           {},  // powersgd
                                       }};
  return &t;
}
