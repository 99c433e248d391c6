// SPDX-License-Identifier: Apache-2.0
//! @file
//! PowerSGD: a rank-r approximation P Q^T of the matrix view, or the tensor dense when that
//! sends fewer bytes (docs/codecs.md, "powersgd").
#include <algorithm>
#include <array>
#include <cmath>

#include "gradcodec/blocks/layout.hpp"
#include "gradcodec/powersgd.hpp"
#include "src/codecs/descriptor.hpp"
#include "src/codecs/error_bounds.hpp"

namespace gradcodec::detail {
namespace {

constexpr std::array params{
    param_info{"rank", "4", "1..64", "rank r of the approximation"},
    param_info{"eps", "1e-08", ">= 0", "Gram-Schmidt epsilon added to each column norm"},
    param_info{"min_rate", "2", ">= 0", "compress only if rows*cols > min_rate*(rows+cols)*r"},
    param_nonfinite};

status check(const codec_spec& s) {
  if (s.rank < 1 || s.rank > 64) return out_of_range(s, "rank", "1..64");
  if (!(s.eps >= 0.0f) || !std::isfinite(s.eps)) return out_of_range(s, "eps", "[0, FLT_MAX]");
  if (!(s.min_rate >= 0.0f) || !std::isfinite(s.min_rate))
    return out_of_range(s, "min_rate", "[0, FLT_MAX]");
  return {};
}

std::uint64_t payload_from_spec(const codec_spec& s, std::uint64_t n, dtype,
                                std::uint64_t rows) noexcept {
  using blocks::align16;
  if (n == 0) return 0;  // an empty tensor has an empty payload whatever its shape
  const std::uint64_t dense = align16(n * 4);
  if (rows == 0) {
    // Any shape: the worst of dense (bypass) and a 1 x n or n x 1 factorisation.
    const std::uint64_t factored = blocks::powersgd_layout_of(1, n, 1).total + 16;
    return std::max({dense, factored, align16(std::uint64_t{s.rank} * 4 * (n + 1)) + 16});
  }
  const std::uint64_t cols = n / rows;
  return powersgd_compresses(s, rows, cols)
             ? blocks::powersgd_layout_of(rows, cols, powersgd_rank(s, rows, cols)).total
             : dense;
}

result<std::uint64_t> payload_from_header(const frame_header& h) noexcept {
  if (h.n == 0) {
    if (h.count != 0 || h.group != 0) return corrupt_frame("empty powersgd frame with a shape");
    return std::uint64_t{0};
  }
  if (h.count < 1 || h.n % h.count != 0) return corrupt_frame("rows do not divide n");
  const std::uint64_t cols = h.n / h.count;
  if (h.group > 64 || h.group > h.count || h.group > cols)
    return corrupt_frame("rank out of range");
  return blocks::powersgd_layout_of(h.count, cols, h.group).total;
}

codec_bounds powersgd_bounds(const codec_spec&, std::uint64_t) noexcept {
  // P P^T M with orthonormal P: an orthogonal projection, never larger than M, but no
  // share of ||M||^2 is guaranteed when P misses M's column space.
  codec_bounds b;
  b.variance = 1;
  b.max_relative = no_bound;
  b.residual_gain = no_bound;
  b.feedback_safe = true;
  b.reason =
      "a projection (never expands, no contraction guaranteed); the method is "
      "defined with error feedback, which its warm-started power iteration needs "
      "(Vogels et al. 2019)";
  return b;
}

}  // namespace

extern constinit const codec_descriptor powersgd_descriptor{
    .info = {codec_id::powersgd,
             "powersgd",
             "PowerSGD rank-r low-rank approximation",
             "32*r*(rows+cols)/n",
             false,
             params,
             header_meaning{"rows", "rank, 0 = sent dense", "", "eps"},
             {.dense = true}},
    .check = check,
    .print =
        [](const codec_spec& s, spec_printer& out) {
          out.add("rank", s.rank);
          out.add_float("eps", s.eps);
          out.add_float("min_rate", s.min_rate);
        },
    .payload_from_spec = payload_from_spec,
    .payload_from_header = payload_from_header,
    .spec_from_header =
        [](const frame_header& h, codec_spec& s) noexcept {
          if (h.group > 0) s.rank = h.group;
          s.eps = h.param;
        },
    .bounds = powersgd_bounds,
};

}  // namespace gradcodec::detail
