// SPDX-License-Identifier: Apache-2.0
//! @file
//! The codec rows of one ISA variant, each defined by its family's translation unit (the
//! end of cpu/kernels/<family>-inl.hpp) and collected by the variant's table
//! (cpu/table-inl.hpp). Included inside namespace gradcodec::cpu::<isa>.

//! The PowerSGD phase kernels and the majority vote (cpu/kernels/powersgd-inl.hpp,
//! vote-inl.hpp): the rest of the variant's table.
const detail::powersgd_kernels* powersgd_phase_kernels() noexcept;
const detail::vote_kernels* vote_kernels() noexcept;

extern const detail::codec_ops topk_ops, dgc_ops, randomk_ops, threshold_ops, qsgd_ops,
    terngrad_ops, minmax_ops, onebit_ops, sign_ops, cast_ops, powersgd_ops, block_scaled_ops;

// Defines a codec's row from its four entry points, named after the codec.
#ifndef GRADCODEC_CPU_CODEC_ROW
#define GRADCODEC_CPU_CODEC_ROW(codec)                                         \
  constinit const detail::codec_ops codec##_ops {                              \
    codec##_workspace, codec##_encode, codec##_decode, codec##_encode_feedback \
  }
#endif
