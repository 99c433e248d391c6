// SPDX-License-Identifier: Apache-2.0
//! @file
//! min-max: b-bit codes between each bucket's minimum and maximum (docs/codecs.md,
//! "minmax").
#include <array>
#include <cmath>

#include "src/codecs/descriptor.hpp"
#include "src/codecs/error_bounds.hpp"
#include "src/codecs/quant.hpp"

namespace gradcodec::detail {
namespace {

constexpr std::array params{
    param_info{"bits", "4", "1..8", "bits per element"},
    param_info{"bucket", "512", "1..16777216", "elements per (min, max) pair"},
    param_info{"rounding", "nearest", "nearest|stochastic", "level rounding"}, param_nonfinite};

codec_bounds minmax_bounds(const codec_spec& s, std::uint64_t n) noexcept {
  // Step d = (max - min)/(2^b - 1) <= 2 max|x|/(2^b - 1).
  const double B = group_of(s, n), levels = std::ldexp(1.0, static_cast<int>(s.bits)) - 1;
  const bool stochastic = s.rounding == rounding_mode::stochastic;
  return quantizer_bounds(stochastic, B / (levels * levels), (stochastic ? 2 : 1) / levels,
                          stochastic ? "every error is below one step, 2/(2^bits - 1) of max|x|"
                                     : "every error is at most half a step, 1/(2^bits - 1) of "
                                       "max|x|");
}

}  // namespace

extern constinit const codec_descriptor minmax_descriptor{
    .info = {codec_id::minmax,
             "minmax",
             "min-max b-bit per bucket",
             "bits + 64/bucket",
             false,
             params,
             header_meaning{"", "bucket", "bits", ""},
             {.two_phase = true}},
    .modes = mode_stochastic,
    .check = [](const codec_spec& s) -> status {
      if (s.bits < 1 || s.bits > 8) return out_of_range(s, "bits", "1..8");
      return {};
    },
    .print =
        [](const codec_spec& s, spec_printer& out) {
          out.add("bits", s.bits);
          out.add("bucket", s.bucket);
          out.add_rounding(s.rounding);
        },
    .payload_from_spec = [](const codec_spec& s, std::uint64_t n, dtype,
                            std::uint64_t) noexcept { return bucketed_payload(s, n, 2, s.bits); },
    .payload_from_header = [](const frame_header& h) noexcept -> result<std::uint64_t> {
      if (h.level < 1 || h.level > 8) return corrupt_frame("bits out of range");
      return bucketed_payload(h, 2, h.level);
    },
    .spec_from_header = [](const frame_header& h, codec_spec& s) noexcept { s.bits = h.level; },
    .bounds = minmax_bounds,
};

}  // namespace gradcodec::detail
