// SPDX-License-Identifier: Apache-2.0
//! @file
//! fp16 and bf16: every element cast, rounding to nearest even (docs/codecs.md, "fp16 and
//! bf16").
#include <array>
#include <cmath>

#include "gradcodec/blocks/layout.hpp"
#include "src/codecs/descriptor.hpp"
#include "src/codecs/error_bounds.hpp"

namespace gradcodec::detail {
namespace {

constexpr std::array params{param_nonfinite};

std::uint64_t cast_payload(const codec_spec&, std::uint64_t n, dtype, std::uint64_t) noexcept {
  return blocks::cast_payload_bytes(n);
}

result<std::uint64_t> cast_payload_of(const frame_header& h) noexcept {
  return blocks::cast_payload_bytes(h.n);
}

//! Round to nearest even: relative error 2^-(significant bits) of each value, plus half
//! the smallest subnormal spacing.
codec_bounds cast_bounds(int significant_bits, int half_subnormal_exponent,
                         std::string_view reason) {
  codec_bounds b;
  b.variance = 1;  // values below the smallest subnormal round to zero
  b.max_relative = std::ldexp(1.0, -significant_bits);
  b.max_absolute = std::ldexp(1.0, half_subnormal_exponent);
  b.reason = reason;
  return with_feedback_gain(b);
}

//! fp16 or bf16: the same payload and no parameters of their own.
constexpr codec_descriptor cast_member(codec_info info,
                                       codec_bounds (*bounds)(const codec_spec&,
                                                              std::uint64_t) noexcept) {
  return {.info = info,
          .payload_from_spec = cast_payload,
          .payload_from_header = cast_payload_of,
          .bounds = bounds};
}

}  // namespace

extern constinit const codec_descriptor fp16_descriptor = cast_member(
    {codec_id::fp16,
     "fp16",
     "IEEE half cast, round to nearest even",
     "16",
     false,
     params,
     {},
     {.dense = true}},
    [](const codec_spec&, std::uint64_t) noexcept {
      return cast_bounds(11, -25,
                         "relative rounding 2^-11 plus 2^-25 absolute (|x| < 65520; larger "
                         "values become Inf)");
    });

extern constinit const codec_descriptor bf16_descriptor =
    cast_member({codec_id::bf16,
                 "bf16",
                 "bfloat16 cast, round to nearest even",
                 "16",
                 false,
                 params,
                 {},
                 {.dense = true}},
                [](const codec_spec&, std::uint64_t) noexcept {
                  return cast_bounds(8, -134, "relative rounding 2^-8 plus 2^-134 absolute");
                });

}  // namespace gradcodec::detail
