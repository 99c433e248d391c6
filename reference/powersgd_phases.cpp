// SPDX-License-Identifier: Apache-2.0
//! @file
//! The scalar PowerSGD phases (docs/codecs.md "powersgd"), the phase API's oracle: every
//! sum the canonical sum, one f32 rounding per operation. The CPU and CUDA phases
//! (contract/powersgd_kernels.hpp) reproduce them bit for bit.
#include <cmath>
#include <cstdint>

#include "contract/powersgd_kernels.hpp"
#include "gradcodec/blocks/fmath.hpp"
#include "reference/common.hpp"

namespace gradcodec {
namespace {

using reference::canonical_sum;

bool scalar_nonfinite_sum(const_tensor_view grad, const float* residual) {
  for (std::uint64_t k = 0; k < grad.n; ++k) {
    const float g = reference::load(grad, k);
    if (!std::isfinite(g) || !std::isfinite(residual[k] + g)) return true;
  }
  return false;
}

void scalar_compute_p(const_tensor_view grad, float* residual, const float* q, float* p,
                      std::uint64_t rows, std::uint64_t cols, std::uint32_t r) {
  for (std::uint64_t k = 0; k < grad.n; ++k)
    residual[k] = blocks::fadd_nan_first(residual[k], reference::load(grad, k));
  const float* m = residual;
  for (std::uint64_t i = 0; i < rows; ++i)
    for (std::uint32_t c = 0; c < r; ++c)
      p[i * r + c] =
          canonical_sum(cols, [&](std::uint64_t j) { return m[i * cols + j] * q[j * r + c]; });
}

void scalar_orthogonalize(float* m, std::uint64_t rows, std::uint32_t r, float eps) {
  for (std::uint32_t j = 0; j < r; ++j) {
    // Two projection passes ("twice is enough"): when column j lies (nearly) in the span
    // of the earlier columns, one pass leaves rounding noise that is far from orthogonal
    // to them, and normalising that noise would break P-hat P-hat^T as a projection.
    for (int pass = 0; pass < 2; ++pass) {
      for (std::uint32_t i = 0; i < j; ++i) {
        const float d =
            canonical_sum(rows, [&](std::uint64_t k) { return m[k * r + j] * m[k * r + i]; });
        for (std::uint64_t k = 0; k < rows; ++k) {
          const float proj = d * m[k * r + i];
          m[k * r + j] = m[k * r + j] - proj;
        }
      }
    }
    const float nrm = std::sqrt(
        canonical_sum(rows, [&](std::uint64_t k) { return m[k * r + j] * m[k * r + j]; }));
    const float den = nrm + eps;
    for (std::uint64_t k = 0; k < rows; ++k) m[k * r + j] = m[k * r + j] / den;
  }
}

void scalar_compute_q(const float* m, std::uint64_t rows, std::uint64_t cols, const float* p,
                      std::uint32_t r, float* q) {
  for (std::uint64_t j = 0; j < cols; ++j)
    for (std::uint32_t c = 0; c < r; ++c)
      q[j * r + c] =
          canonical_sum(rows, [&](std::uint64_t i) { return m[i * cols + j] * p[i * r + c]; });
}

void scalar_finish(const float* p, float* q, std::uint64_t rows, std::uint64_t cols,
                   std::uint32_t r, int world, bool error_feedback, float* residual,
                   tensor_view out) {
  const float w = static_cast<float>(world);
  for (std::uint64_t k = 0; k < cols * r; ++k) q[k] = q[k] / w;
  for (std::uint64_t i = 0; i < rows; ++i) {
    for (std::uint64_t j = 0; j < cols; ++j) {
      const float o =
          canonical_sum(r, [&](std::uint64_t c) { return p[i * r + c] * q[j * r + c]; });
      const std::uint64_t k = i * cols + j;
      residual[k] = error_feedback ? residual[k] - o : 0.0f;
      reference::store(out, k, o);
    }
  }
}

}  // namespace

namespace detail {

const powersgd_kernels& powersgd_scalar_kernels() noexcept {
  static const powersgd_kernels k{"scalar-reference",   scalar_nonfinite_sum, scalar_compute_p,
                                  scalar_orthogonalize, scalar_compute_q,     scalar_finish};
  return k;
}

}  // namespace detail
}  // namespace gradcodec
