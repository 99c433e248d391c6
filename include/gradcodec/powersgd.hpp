// SPDX-License-Identifier: Apache-2.0
//! @file
//! PowerSGD (Vogels et al., 2019) as the three phases around its two allreduces, with the
//! state (Q and the error-feedback residual) owned by the caller. One step for a matrix M
//! (rows x cols, row-major) of one rank, with W ranks:
//!
//!   powersgd_compute_p   residual += grad (M = g + e); P = M Q           -> allreduce-sum P
//!   powersgd_compute_q   orthogonalize P (Gram-Schmidt, eps); Q = M^T P   -> allreduce-sum Q
//!   powersgd_finish      Q /= W; out = P Q^T; residual = M - out; keep Q (warm start)
//!
//! Q starts from powersgd_init_q, identical on all ranks for the same seed and tensor id.
//! Tensors for which powersgd_compresses() is false are better sent dense (the phases still
//! work on them). Shapes: the matrix has rows = view.rows (1 when view.rows is 0) and
//! cols = n / rows; r = powersgd_rank(spec, rows, cols); P is rows x r and Q is cols x r,
//! both row-major f32. Every sum is the canonical sum of docs/codecs.md, so every rank and
//! every backend computes identical bits. No function allocates (on the host, compute_q and
//! project_q keep their scratch on the stack: up to 128 KiB per thread); spans must not overlap.
//! On any error status nothing was written.
//!
//! The state (Q, residual and a caller step counter) can be checkpointed with
//! powersgd_save_state / powersgd_load_state (byte format in docs/format.md).
#pragma once

#include <cstdint>
#include <span>

#include "gradcodec/codec.hpp"
#include "gradcodec/context.hpp"
#include "gradcodec/spec.hpp"
#include "gradcodec/status.hpp"
#include "gradcodec/views.hpp"

namespace gradcodec {

//! Whether a rows x cols matrix is worth compressing at the spec's rank and min_rate:
//! rows*cols > min_rate*(rows+cols)*r in double, and never for rows <= 1 or cols <= 1.
bool powersgd_compresses(const codec_spec& spec, std::uint64_t rows, std::uint64_t cols) noexcept;

//! The rows of the near-square matrix a flat tensor of n elements is given when nothing
//! names its shape (the benchmarks, the cost model and its calibration): the largest divisor
//! of n not above sqrt(n), at least 1.
std::uint64_t powersgd_square_rows(std::uint64_t n) noexcept;

//! The effective rank: min(spec.rank, rows, cols).
std::uint32_t powersgd_rank(const codec_spec& spec, std::uint64_t rows,
                            std::uint64_t cols) noexcept;

//! The matrix the stateless codec `powersgd` sees in a view: rows = view.rows (1 when 0),
//! cols = n / rows, and the rank it sends, 0 when the matrix is sent dense (not worth
//! compressing). Requires rows to divide n.
struct powersgd_frame_shape {
  std::uint64_t rows, cols;
  std::uint32_t r;
};
powersgd_frame_shape powersgd_frame_shape_of(const codec_spec& spec, const_tensor_view v) noexcept;

//! Fills q (cols x r, row-major) with the shared-seed start: approximately standard normal
//! values from the counter generator keyed by (ctx.seed, 0, ctx.tensor_id), then
//! orthonormalised columns. ctx.step is not used, so every rank and step agrees.
status powersgd_init_q(const codec_spec& spec, const context& ctx, std::uint64_t rows,
                       std::uint64_t cols, std::span<float> q) noexcept;

//! residual += grad (the residual now holds M); p = M q.  p: rows x r, row-major.
//! The shape comes from grad (grad.rows, grad.n). With nonfinite=error, a NaN/Inf in grad
//! or in residual + grad returns nonfinite_input.
status powersgd_compute_p(const codec_spec& spec, const_tensor_view grad, std::span<float> residual,
                          std::span<const float> q, std::span<float> p) noexcept;

//! Orthonormalises the columns of the summed p in place, then q = M^T p (cols x r).
status powersgd_compute_q(const codec_spec& spec, std::span<float> p,
                          std::span<const float> residual, std::uint64_t rows, std::uint64_t cols,
                          std::span<float> q) noexcept;

//! q = q / world (the mean of the summed q); out = p q^T (written in out's dtype);
//! residual = M - out (the f32 value before dtype rounding) or zero when error feedback is
//! off. q keeps the mean for the next step's warm start. The shape comes from out
//! (out.rows, out.n). world must be in 1..2^24.
status powersgd_finish(const codec_spec& spec, std::span<const float> p, std::span<float> q,
                       int world_size, bool error_feedback, std::span<float> residual,
                       tensor_view out) noexcept;

//! Orthonormalises the r columns of a (rows x r, row-major; a.size() must be rows*r) by
//! modified Gram-Schmidt with one re-orthogonalization pass: for each column j: subtract
//! its projections on columns 0..j-1, twice, then divide by (norm + eps). The second pass
//! keeps the columns orthonormal when the matrix has rank below r. The exact operation
//! order is in docs/codecs.md.
status powersgd_orthogonalize(std::span<float> a, std::uint64_t rows, std::uint32_t r,
                              float eps) noexcept;

// --- the phases on a GPU ------------------------------------------------------------------
//
// The same five calls with exec_options: with opt.where = backend::cuda, or automatic and
// the first array (q for init_q, grad for compute_p, p otherwise) in device memory, they
// run on the CUDA backend, stream-ordered on opt.stream (a cudaStream_t; null: the default
// stream) and return once the work is queued; every array must then be device memory
// (invalid_argument otherwise, nothing queued), and nonfinite=error is refused (it needs a
// host scan). The results equal the host's bit for bit except the bit patterns of NaNs
// (a NaN stays a NaN). opt.workspace and opt.threads are not used. The calls above are
// these with exec_options{} (automatic).

status powersgd_init_q(const codec_spec& spec, const context& ctx, std::uint64_t rows,
                       std::uint64_t cols, std::span<float> q, const exec_options& opt) noexcept;
status powersgd_compute_p(const codec_spec& spec, const_tensor_view grad, std::span<float> residual,
                          std::span<const float> q, std::span<float> p,
                          const exec_options& opt) noexcept;
status powersgd_compute_q(const codec_spec& spec, std::span<float> p,
                          std::span<const float> residual, std::uint64_t rows, std::uint64_t cols,
                          std::span<float> q, const exec_options& opt) noexcept;
status powersgd_finish(const codec_spec& spec, std::span<const float> p, std::span<float> q,
                       int world_size, bool error_feedback, std::span<float> residual,
                       tensor_view out, const exec_options& opt) noexcept;
status powersgd_orthogonalize(std::span<float> a, std::uint64_t rows, std::uint32_t r, float eps,
                              const exec_options& opt) noexcept;

// --- many layers at once ------------------------------------------------------------------

//! One matrix of a batch: `a` holds rows x r floats, row-major.
struct powersgd_matrix {
  std::span<float> a;
  std::uint64_t rows = 0;
  std::uint32_t r = 0;
};

//! powersgd_orthogonalize of every matrix of the batch with the same eps, bit for bit as one
//! call each; the matrices must not overlap. On the GPU (opt as for the phases, decided by
//! the first matrix) one launch takes up to 64 matrices, a warp each, instead of a launch
//! per layer. Every matrix is checked before any is touched.
status powersgd_orthogonalize_batch(std::span<const powersgd_matrix> batch, float eps,
                                    const exec_options& opt = {}) noexcept;

//! q = M^T p (cols x r) for a p that is already orthonormal. powersgd_compute_q is
//! powersgd_orthogonalize(p) then this, so a caller with many tensors can orthogonalise
//! all their P factors in one powersgd_orthogonalize_batch and get the same bits.
status powersgd_project_q(const codec_spec& spec, std::span<const float> p,
                          std::span<const float> residual, std::uint64_t rows, std::uint64_t cols,
                          std::span<float> q, const exec_options& opt = {}) noexcept;

// --- checkpointing --------------------------------------------------------------------

//! What a saved state describes: the matrix shape, the effective rank and a step counter
//! the caller keeps (stored as is; the phases do not read it).
struct powersgd_state_info {
  std::uint64_t rows = 0;
  std::uint64_t cols = 0;
  std::uint32_t rank = 0;
  std::uint64_t step = 0;

  friend bool operator==(const powersgd_state_info&, const powersgd_state_info&) = default;
};

//! Bytes of a saved state: a 48-byte header, Q (cols*rank f32) and the residual
//! (rows*cols f32), each padded to 16 bytes, then a 4-byte CRC-32C. 0 for an invalid shape
//! (rows or cols 0, rank outside 1..min(64, rows, cols), or rows*cols above 2^48).
std::uint64_t powersgd_state_bytes(std::uint64_t rows, std::uint64_t cols,
                                   std::uint32_t rank) noexcept;

//! Writes the state (q: cols*rank floats, residual: rows*cols floats) into out and returns
//! the bytes written (powersgd_state_bytes()).
result<std::size_t> powersgd_save_state(const powersgd_state_info& info, std::span<const float> q,
                                        std::span<const float> residual,
                                        mutable_bytes out) noexcept;

//! Reads and checks a saved state's header (magic, version, reserved bytes, shape, size)
//! and its checksum, without copying anything out. state must be exactly the saved bytes.
result<powersgd_state_info> powersgd_peek_state(const_bytes state) noexcept;

//! Checks a saved state completely (as powersgd_peek_state), that it has the expected
//! rows, cols and rank and that q and residual have its sizes, then copies Q and the
//! residual out. Returns what the state describes (including the step counter). A corrupt
//! state is corrupt_frame (or unsupported_version); another shape is shape_mismatch.
result<powersgd_state_info> powersgd_load_state(const_bytes state, std::uint64_t rows,
                                                std::uint64_t cols, std::uint32_t rank,
                                                std::span<float> q,
                                                std::span<float> residual) noexcept;

}  // namespace gradcodec
