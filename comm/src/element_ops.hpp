// SPDX-License-Identifier: Apache-2.0
//! @file
//! The per-element arithmetic of the strategy layer, one definition for the host loops
//! (host_memory.cpp) and the CUDA kernels (cuda_memory.cu), so both give the same bits:
//! the library's element access in any dtype, explicit fma and division, and NaN results
//! as the canonical NaN (GPUs and x86 pick different NaN payloads otherwise).
#pragma once

#include <cstdint>

#include "contract/scalar_values.hpp"
#include "gradcodec/blocks/fmath.hpp"
#include "gradcodec/dtype.hpp"

namespace gradcodec::comm::detail {

using gradcodec::detail::load_value;
using gradcodec::detail::store_value;

//! x / divisor (x itself when the divisor is 1); NaN canonical.
GRADCODEC_HD float scaled(float x, float divisor) {
  if (blocks::is_nan(x)) return blocks::canonical_nan();
  return divisor == 1.0f ? x : blocks::fdiv(x, divisor);
}

//! One term of an ordered sum: fma(alpha, v, acc); NaN canonical.
GRADCODEC_HD float accumulated(float alpha, float v, float acc) {
  return blocks::canonicalize_nan(blocks::ffma(alpha, v, acc));
}

}  // namespace gradcodec::comm::detail
