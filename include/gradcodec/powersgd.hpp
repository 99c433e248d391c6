// SPDX-License-Identifier: Apache-2.0
//! @file
//! PowerSGD (Vogels et al., 2019) as the three phases around its two allreduces, with the
//! state (Q and the error-feedback residual) owned by the caller. One step for a matrix M
//! (rows x cols) of one rank, with W ranks:
//!
//!   powersgd_compute_p   residual += grad (M = g + e); P = M Q           -> allreduce-sum P
//!   powersgd_compute_q   orthogonalize P (Gram-Schmidt, eps); Q = M^T P   -> allreduce-sum Q
//!   powersgd_finish      Q /= W; out = P Q^T; residual = M - out; keep Q (warm start)
//!
//! Q starts from powersgd_init_q, identical on all ranks for the same seed and tensor id.
//! Tensors for which powersgd_compresses() is false are sent dense instead.
#pragma once

#include <cstdint>
#include <span>

#include "gradcodec/context.hpp"
#include "gradcodec/spec.hpp"
#include "gradcodec/status.hpp"
#include "gradcodec/views.hpp"

namespace gradcodec {

//! Whether a rows x cols matrix is worth compressing at the spec's rank and min_rate
//! (never for rows <= 1 or cols <= 1).
bool powersgd_compresses(const codec_spec& spec, std::uint64_t rows, std::uint64_t cols) noexcept;

//! The effective rank: min(spec.rank, rows, cols).
std::uint32_t powersgd_rank(const codec_spec& spec, std::uint64_t rows, std::uint64_t cols) noexcept;

//! Fills q (cols x r, row-major) with the shared-seed start: standard normals from the
//! counter generator keyed by (ctx.seed, 0, ctx.tensor_id), then orthonormalised columns.
status powersgd_init_q(const codec_spec& spec, const context& ctx, std::uint64_t rows,
                       std::uint64_t cols, std::span<float> q) noexcept;

//! residual += grad (the residual now holds M); p = M q.  p: rows x r, row-major.
status powersgd_compute_p(const codec_spec& spec, const_tensor_view grad, std::span<float> residual,
                          std::span<const float> q, std::span<float> p) noexcept;

//! Orthonormalises the columns of the summed p in place, then q = M^T p (cols x r).
status powersgd_compute_q(const codec_spec& spec, std::span<float> p, std::span<const float> residual,
                          std::uint64_t rows, std::uint64_t cols, std::span<float> q) noexcept;

//! q *= 1/world (the mean); out = p q^T (written in out's dtype); residual = M - out (or
//! zero when error feedback is off). q keeps the mean for the next step's warm start.
status powersgd_finish(const codec_spec& spec, std::span<const float> p, std::span<float> q,
                       int world_size, bool error_feedback, std::span<float> residual,
                       tensor_view out) noexcept;

//! Orthonormalises the r columns of a (rows x r, row-major) by modified Gram-Schmidt:
//! for each column j: subtract its projections on columns 0..j-1, then divide by
//! (norm + eps). The exact operation order is in docs/codecs.md.
void powersgd_orthogonalize(std::span<float> a, std::uint64_t rows, std::uint32_t r, float eps) noexcept;

}  // namespace gradcodec
