// SPDX-License-Identifier: Apache-2.0
//! @file
//! QSGD: s levels per sign over a bucket norm, stochastic or nearest (docs/codecs.md,
//! "qsgd").
#include <algorithm>
#include <array>
#include <cmath>

#include "gradcodec/blocks/quant.hpp"
#include "src/codecs/descriptor.hpp"
#include "src/codecs/error_bounds.hpp"
#include "src/codecs/quant.hpp"

namespace gradcodec::detail {
namespace {

constexpr std::array params{
    param_info{"levels", "7", "1..127", "s levels per sign; ceil(log2(2s+1)) bits per element"},
    param_info{"bucket", "512", "1..16777216", "elements per norm"},
    param_info{"norm", "max", "l2|max", "bucket norm"},
    param_info{"rounding", "stochastic", "nearest|stochastic", "level rounding"}, param_nonfinite};

codec_bounds qsgd_bounds(const codec_spec& s, std::uint64_t n) noexcept {
  // Step d = norm/s per bucket of B elements; stochastic rounding errs by < d with
  // variance <= min(d^2/4, d|x_i|) per element, nearest by <= d/2.
  const double B = group_of(s, n), lv = s.levels;
  const bool stochastic = s.rounding == rounding_mode::stochastic;
  const double step_rel = s.norm == norm_kind::max ? 1 / lv : std::sqrt(B) / lv;
  const double variance =
      stochastic ? std::min(B / (4 * lv * lv), std::sqrt(B) / lv) : B / (4 * lv * lv);
  return quantizer_bounds(stochastic, variance, stochastic ? step_rel : step_rel / 2,
                          s.norm == norm_kind::max
                              ? "max norm: every error is below one step, 1/levels of max|x|"
                              : "l2 norm: a step is ||x||2/levels, up to sqrt(bucket)/levels of "
                                "max|x|; a contraction only when levels > sqrt(bucket)/2");
}

}  // namespace

extern constinit const codec_descriptor qsgd_descriptor{
    .info = {codec_id::qsgd,
             "qsgd",
             "QSGD: s levels, bucket norm, stochastic rounding",
             "ceil(log2(2s+1)) + 32/bucket",
             true,
             params,
             header_meaning{"", "bucket", "levels", ""},
             {.two_phase = true}},
    .modes = mode_stochastic | mode_norm_max,
    .defaults =
        [](codec_spec& s) noexcept {
          s.rounding = rounding_mode::stochastic;
          s.norm = norm_kind::max;
        },
    .check = [](const codec_spec& s) -> status {
      if (s.levels < 1 || s.levels > 127) return out_of_range(s, "levels", "1..127");
      return {};
    },
    .print =
        [](const codec_spec& s, spec_printer& out) {
          out.add("levels", s.levels);
          out.add("bucket", s.bucket);
          out.add("norm", s.norm == norm_kind::l2 ? "l2" : "max");
          out.add_rounding(s.rounding);
        },
    .payload_from_spec =
        [](const codec_spec& s, std::uint64_t n, dtype, std::uint64_t) noexcept {
          return bucketed_payload(s, n, 1, blocks::qsgd_code_bits(s.levels));
        },
    .payload_from_header = [](const frame_header& h) noexcept -> result<std::uint64_t> {
      if (h.level < 1 || h.level > 127) return corrupt_frame("levels out of range");
      return bucketed_payload(h, 1, blocks::qsgd_code_bits(h.level));
    },
    .spec_from_header =
        [](const frame_header& h, codec_spec& s) noexcept {
          s.levels = h.level;
          s.norm = (h.mode & mode_norm_max) ? norm_kind::max : norm_kind::l2;
        },
    .mode_names =
        [](std::uint8_t mode, std::string& out) {
          append_name(out, mode & mode_norm_max ? "norm_max" : "norm_l2");
        },
    .bounds = qsgd_bounds,
};

}  // namespace gradcodec::detail
