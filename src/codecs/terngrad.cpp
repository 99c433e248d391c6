// SPDX-License-Identifier: Apache-2.0
//! @file
//! TernGrad: {-s, 0, s} per bucket, stochastic, with optional clipping (docs/codecs.md,
//! "terngrad").
#include <algorithm>
#include <array>
#include <cmath>

#include "src/codecs/descriptor.hpp"
#include "src/codecs/error_bounds.hpp"
#include "src/codecs/quant.hpp"

namespace gradcodec::detail {
namespace {

constexpr std::array params{
    param_info{"bucket", "512", "1..16777216", "elements per scale (max |x|)"},
    param_info{"clip", "2.5", ">= 0", "clip at clip*sigma of the bucket before scaling; 0 = off"},
    param_nonfinite};

codec_bounds terngrad_bounds(const codec_spec& s, std::uint64_t n) noexcept {
  if (s.clip > 0)
    return quantizer_bounds(false, no_bound, no_bound,
                            "clipped: a clipped element loses any amount; no bound");
  // QSGD with one level and the max norm: errors below max|x|, variance <=
  // min(B/4, sqrt(B)).
  const double B = group_of(s, n);
  return quantizer_bounds(true, std::min(B / 4, std::sqrt(B)), 1.0,
                          "unbiased, one level: an error may reach max|x| (gain 1) and the "
                          "variance min(bucket/4, sqrt(bucket)) exceeds 1 from 4 elements");
}

}  // namespace

extern constinit const codec_descriptor terngrad_descriptor{
    .info = {codec_id::terngrad,
             "terngrad",
             "TernGrad: {-s,0,s} per bucket, stochastic",
             "2 + 32/bucket",
             false,
             params,
             header_meaning{"", "bucket", "", "clip"},
             {.two_phase = true}},
    .defaults = [](codec_spec& s) noexcept { s.clip = 2.5f; },
    .check = [](const codec_spec& s) -> status {
      if (!(s.clip >= 0.0f) || !std::isfinite(s.clip))
        return out_of_range(s, "clip", "[0, FLT_MAX]");
      return {};
    },
    .print =
        [](const codec_spec& s, spec_printer& out) {
          out.add("bucket", s.bucket);
          out.add_float("clip", s.clip);
        },
    .payload_from_spec = [](const codec_spec& s, std::uint64_t n, dtype,
                            std::uint64_t) noexcept { return bucketed_payload(s, n, 1, 2); },
    .payload_from_header = [](const frame_header& h) noexcept -> result<std::uint64_t> {
      return bucketed_payload(h, 1, 2);
    },
    .spec_from_header = [](const frame_header& h, codec_spec& s) noexcept { s.clip = h.param; },
    .bounds = terngrad_bounds,
};

}  // namespace gradcodec::detail
