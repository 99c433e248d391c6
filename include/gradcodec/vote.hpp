// SPDX-License-Identifier: Apache-2.0
//! @file
//! signSGD with majority vote (Bernstein et al., 2018): the element-wise sign of the sum
//! of the workers' signs, computed from their `sign` frames. docs/codecs.md "Majority vote".
#pragma once

#include <span>

#include "gradcodec/status.hpp"
#include "gradcodec/views.hpp"

namespace gradcodec {

//! out[i] = alpha * sign(c_i) in f32, stored in out's dtype, where c_i = sum over frames of
//! (bit ? -1 : +1) and sign(0) = 0 (a tie gives 0, as in the paper). A bucket whose scale
//! is NaN in any frame (its input held NaN/Inf) comes out NaN; scales are otherwise
//! ignored (the vote is unweighted).
//!
//! Every frame must be a well-formed `sign` frame of exactly its frame_bytes() (else
//! corrupt_frame, or unsupported_version), all with the same n and bucket size, and out.n
//! must equal n (else shape_mismatch); an empty list is invalid_argument. All frames are
//! checked before anything is written; nothing is allocated. On the CPU backend it runs with
//! cpu_default_threads() threads and the active ISA; every thread count and ISA writes the
//! same bytes.
status sign_majority_vote(std::span<const const_bytes> frames, tensor_view out,
                          float alpha = 1.0f) noexcept;

}  // namespace gradcodec
