// SPDX-License-Identifier: Apache-2.0
//! @file
//! What a codec guarantees about its reconstruction error, as a function of its parameters,
//! and what that means for error feedback (docs/codecs.md, "Error bounds and error
//! feedback"). With x a tensor of n elements and x̂ = decode(encode(x)) in exact arithmetic
//! (the f32 evaluation adds relative errors of order 2^-24 to every bound):
//!
//!   E‖x̂ − x‖₂² ≤ variance · ‖x‖₂²          (expectation over the codec's random numbers)
//!   ‖x̂ − x‖∞  ≤ max_relative · ‖x‖∞ + max_absolute   (always)
//!
//! Error feedback (p = g + e, send C(p), e ← p − D(C(p))) keeps the residual bounded when
//! one of them is a contraction: variance < 1 gives ‖e‖₂ ≤ ρ/(1−ρ)·max‖g‖₂ with
//! ρ = √variance, and max_relative < 1 gives ‖e‖∞ ≤ (κ·max‖g‖∞ + τ)/(1−κ). A codec with
//! neither can feed its own error back with gain ≥ 1 and the residual may grow without
//! limit (QSGD with the L2 norm of a 512-element bucket and 7 levels does, in training).
#pragma once

#include <cstdint>
#include <string_view>

#include "gradcodec/spec.hpp"

namespace gradcodec {

struct codec_bounds {
  bool unbiased = false;  //!< E[x̂] = x for every x
  //! Bound on E‖x̂ − x‖₂² / ‖x‖₂² (+Inf: none). For an unbiased codec this is its variance
  //! bound ω; below 1 the codec is contractive with δ = 1 − variance.
  double variance = 0;
  double max_relative = 0;  //!< κ of the ∞-norm bound (+Inf: none)
  double max_absolute = 0;  //!< τ of the ∞-norm bound
  //! Error feedback keeps the residual bounded (one of the bounds is a contraction), or,
  //! for PowerSGD, the method is defined with it (see `reason`).
  bool feedback_safe = false;
  //! How large the residual can grow relative to the largest gradient under error
  //! feedback, from the tighter contraction (ρ/(1−ρ) or κ/(1−κ); +Inf when unsafe or
  //! unbounded). Large values mean slow recovery of the error, e.g. 2047 for onebit with
  //! 2048-element buckets against 127 with 128.
  double residual_gain = 0;
  std::string_view reason;  //!< one sentence: which bound decides, or why there is none
};

//! The bounds of `spec` for a tensor of n elements (bucketed codecs: per bucket of
//! min(bucket, n) elements). n = 0 means any size: the bound that holds for every n
//! (bucketed codecs: a full bucket; top-k and random-k: n large, k = ratio·n).
//! `feedback_safe` does not depend on n when n = 0 is passed.
codec_bounds bounds(const codec_spec& spec, std::uint64_t n = 0) noexcept;

}  // namespace gradcodec
