// SPDX-License-Identifier: Apache-2.0
//! @file
//! The kernels behind the PowerSGD phase API (include/gradcodec/powersgd.hpp). The public
//! functions in src/powersgd.cpp check their arguments, then run those of the host backend
//! chosen as for codec calls (backend_table::powersgd): the CPU backend's
//! (cpu/kernels/powersgd-inl.hpp, for the pinned ISA) or the reference's, the plain scalar
//! code of reference/powersgd_phases.cpp. Both compute the same bits (docs/codecs.md).
//! Kernels never fail and take already-checked shapes; spans do not overlap.
#pragma once

#include <cstdint>

#include "gradcodec/codec.hpp"
#include "gradcodec/views.hpp"

namespace gradcodec::detail {

struct powersgd_kernels {
  const char* name;
  //! Whether any grad[k] or residual[k] + grad[k] is NaN or +-Inf (nonfinite=error).
  bool (*nonfinite_sum)(const_tensor_view grad, const float* residual);
  //! residual[k] = residual[k] + grad[k] (M); p = M q (rows x r; q is cols x r, row-major).
  void (*compute_p)(const_tensor_view grad, float* residual, const float* q, float* p,
                    std::uint64_t rows, std::uint64_t cols, std::uint32_t r);
  //! orth(a, rows, r, eps) in place, a row-major rows x r.
  void (*orthogonalize)(float* a, std::uint64_t rows, std::uint32_t r, float eps);
  //! q = M^T p (cols x r), M = m (rows x cols), p rows x r.
  void (*compute_q)(const float* m, std::uint64_t rows, std::uint64_t cols, const float* p,
                    std::uint32_t r, float* q);
  //! q = q / world; out = p q^T (out's dtype); residual = ef ? residual - out : +0.0.
  void (*finish)(const float* p, float* q, std::uint64_t rows, std::uint64_t cols, std::uint32_t r,
                 int world, bool ef, float* residual, tensor_view out);
};

//! The scalar kernels (reference/powersgd_phases.cpp): the oracle the CPU ones are tested
//! against, and the reference backend's.
const powersgd_kernels& powersgd_scalar_kernels() noexcept;
//! The kernels the phase API runs on host memory for `where` (automatic, reference or cpu):
//! the host backend a codec call would take. Null for cpu when the CPU backend is missing.
const powersgd_kernels* powersgd_host_kernels(backend where) noexcept;

}  // namespace gradcodec::detail
