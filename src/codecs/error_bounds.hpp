// SPDX-License-Identifier: Apache-2.0
//! @file
//! The shapes of bound the descriptors' bounds() build on (docs/codecs.md, "Error bounds
//! and error feedback", derives each codec's).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string_view>

#include "gradcodec/bounds.hpp"
#include "gradcodec/spec.hpp"

namespace gradcodec::detail {

inline constexpr double no_bound = std::numeric_limits<double>::infinity();

//! Elements per scale group: the bucket, or n when the tensor is smaller.
inline double group_of(const codec_spec& s, std::uint64_t n) {
  return static_cast<double>(n == 0 ? s.bucket : std::min<std::uint64_t>(s.bucket, n));
}

//! Fills feedback_safe and residual_gain from the numeric bounds.
inline codec_bounds with_feedback_gain(codec_bounds b) {
  const double rho = b.variance < 1 ? std::sqrt(b.variance) : no_bound;
  const double l2_gain = rho < 1 ? rho / (1 - rho) : no_bound;
  const double max_gain = b.max_relative < 1 ? b.max_relative / (1 - b.max_relative) : no_bound;
  b.residual_gain = std::min(l2_gain, max_gain);
  b.feedback_safe = b.residual_gain < no_bound;
  return b;
}

//! Sparsifiers that keep a subset of the values unchanged: ‖x̂ − x‖² = ‖x‖² − kept energy.
inline codec_bounds subset_bounds(double variance, std::string_view reason) {
  codec_bounds b;
  b.variance = variance;
  b.max_relative = 1;  // an unsent element may be as large as the largest
  b.reason = reason;
  return with_feedback_gain(b);
}

inline codec_bounds quantizer_bounds(bool unbiased, double variance, double max_relative,
                                     std::string_view reason) {
  codec_bounds b;
  b.unbiased = unbiased;
  b.variance = variance;
  b.max_relative = max_relative;
  b.reason = reason;
  return with_feedback_gain(b);
}

}  // namespace gradcodec::detail
