// SPDX-License-Identifier: Apache-2.0
//! @file
//! threshold: every |x| >= tau, optionally the largest `cap` of them (docs/codecs.md,
//! "threshold").
#include <algorithm>
#include <array>
#include <cmath>

#include "src/codecs/descriptor.hpp"
#include "src/codecs/error_bounds.hpp"
#include "src/codecs/sparse.hpp"

namespace gradcodec::detail {
namespace {

constexpr std::array params{
    param_info{"tau", "0.005", ">= 0", "keep elements with |x| >= tau"},
    param_info{"cap", "0", ">= 0", "keep at most cap elements (the largest); 0 = no cap"},
    param_nonfinite};

codec_bounds threshold_bounds(const codec_spec& s, std::uint64_t n) noexcept {
  codec_bounds b;
  b.variance = 1;  // nothing may pass
  b.max_relative = s.cap > 0 ? 1.0 : 0.0;
  b.max_absolute = s.cap > 0 ? 0.0 : static_cast<double>(s.tau);
  // Without a cap every unsent |x| < tau: the residual stays below tau. With one, the
  // elements over tau beyond the cap are a top-cap selection: ||e||^2 <=
  // max(n tau^2, (1 - cap/n) ||p||^2), bounded too.
  b.residual_gain = 0;
  if (s.cap > 0) {
    const double rho =
        n == 0 ? 1.0
               : std::sqrt(1 - static_cast<double>(std::min(s.cap, n)) / static_cast<double>(n));
    b.residual_gain = rho < 1 ? rho / (1 - rho) : no_bound;
  }
  b.feedback_safe = true;
  b.reason = s.cap > 0 ? "bounded: unsent elements are below tau or outside the top cap"
                       : "absolute: every unsent |x| is below tau";
  return b;
}

}  // namespace

extern constinit const codec_descriptor threshold_descriptor{
    .info = {codec_id::threshold,
             "threshold",
             "all |x| >= tau (variable count, optional cap)",
             "64*m/n for m kept",
             false,
             params,
             header_meaning{"items sent", "", "", "tau"},
             {.two_phase = true}},
    .defaults = [](codec_spec& s) noexcept { s.tau = 0.005f; },
    .check = [](const codec_spec& s) -> status {
      if (!(s.tau >= 0.0f) || !std::isfinite(s.tau)) return out_of_range(s, "tau", "[0, FLT_MAX]");
      return {};
    },
    .print =
        [](const codec_spec& s, spec_printer& out) {
          out.add_float("tau", s.tau);
          if (s.cap > 0) out.add("cap", s.cap);
        },
    // The largest frame: every element passes, up to the cap.
    .payload_from_spec =
        [](const codec_spec& s, std::uint64_t n, dtype type, std::uint64_t) noexcept {
          return indexed_payload(s.cap > 0 ? std::min(s.cap, n) : n, n, type);
        },
    .payload_from_header = [](const frame_header& h) noexcept { return indexed_payload(h); },
    .spec_from_header = [](const frame_header& h, codec_spec& s) noexcept { s.tau = h.param; },
    .bounds = threshold_bounds,
};

}  // namespace gradcodec::detail
