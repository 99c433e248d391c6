// SPDX-License-Identifier: Apache-2.0
//! @file
//! signSGD and scaled sign: one bit per element and a scale per bucket (none, mean |x| or
//! ||x||2/sqrt(n)) (docs/codecs.md, "sign").
#include <array>
#include <cmath>

#include "src/codecs/descriptor.hpp"
#include "src/codecs/quant.hpp"

namespace gradcodec::detail {
namespace {

constexpr std::array params{param_info{"bucket", "128", "1..16777216", "elements per scale"},
                            param_info{"scale", "l2", "none|mean|l2",
                                       "1 (signSGD), mean |x| (EF-signSGD) or ||x||2/sqrt(n)"},
                            param_nonfinite};

constexpr std::string_view scale_name(unsigned k) {
  return k == 0 ? "none" : k == 1 ? "mean" : "l2";
}

codec_bounds sign_bounds(const codec_spec& s, std::uint64_t n) noexcept {
  const double B = group_of(s, n);
  if (s.scale == scale_kind::none)
    return quantizer_bounds(false, no_bound, no_bound,
                            "unscaled sign sends +-1 whatever the magnitude: no relative bound");
  if (s.scale == scale_kind::l2) {
    // ||x - s sign x||^2 = 2||x||^2 (1 - ||x||1 / (sqrt(B) ||x||2)); per element
    // |x_i - s| < max|x|, at most sqrt(1 - 1/B) of it.
    return quantizer_bounds(false, 2 * (1 - 1 / std::sqrt(B)), std::sqrt(1 - 1 / B),
                            "max-norm contraction sqrt(1 - 1/bucket); the l2 error may exceed "
                            "||x||");
  }
  return bucket_mean_bounds(B);
}

}  // namespace

extern constinit const codec_descriptor sign_descriptor{
    .info = {codec_id::sign,
             "sign",
             "signSGD / scaled sign (EF-signSGD)",
             "1 + 32/bucket",
             false,
             params,
             header_meaning{"", "bucket", "", ""},
             {.two_phase = true, .majority_vote = true}},
    .modes = mode_scale_mask,
    .defaults =
        [](codec_spec& s) noexcept {
          s.bucket = 128;
          s.scale = scale_kind::l2;
        },
    .print =
        [](const codec_spec& s, spec_printer& out) {
          out.add("bucket", s.bucket);
          out.add("scale", scale_name(static_cast<unsigned>(s.scale)));
        },
    .payload_from_spec = [](const codec_spec& s, std::uint64_t n, dtype,
                            std::uint64_t) noexcept { return bucketed_payload(s, n, 1, 1); },
    .payload_from_header = [](const frame_header& h) noexcept -> result<std::uint64_t> {
      if (((h.mode & mode_scale_mask) >> mode_scale_shift) > 2)
        return corrupt_frame("unknown sign scale");
      return bucketed_payload(h, 1, 1);
    },
    .spec_from_header =
        [](const frame_header& h, codec_spec& s) noexcept {
          s.scale = static_cast<scale_kind>((h.mode & mode_scale_mask) >> mode_scale_shift);
        },
    .mode_names =
        [](std::uint8_t mode, std::string& out) {
          append_name(out, std::string("scale=").append(scale_name(static_cast<unsigned>(
                               (mode & mode_scale_mask) >> mode_scale_shift))));
        },
    .bounds = sign_bounds,
};

}  // namespace gradcodec::detail
