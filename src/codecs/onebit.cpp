// SPDX-License-Identifier: Apache-2.0
//! @file
//! 1-bit SGD: one bit per element and two reconstruction means per bucket (docs/codecs.md,
//! "onebit").
#include <array>

#include "src/codecs/descriptor.hpp"
#include "src/codecs/quant.hpp"

namespace gradcodec::detail {
namespace {

constexpr std::array params{
    param_info{"bucket", "128", "1..16777216", "elements per pair of reconstruction means"},
    param_nonfinite};

}  // namespace

extern constinit const codec_descriptor onebit_descriptor{
    .info = {codec_id::onebit,
             "onebit",
             "1-bit SGD: two reconstruction means per bucket",
             "1 + 64/bucket",
             false,
             params,
             header_meaning{"", "bucket", "", ""},
             {.two_phase = true}},
    .defaults = [](codec_spec& s) noexcept { s.bucket = 128; },
    .print = [](const codec_spec& s, spec_printer& out) { out.add("bucket", s.bucket); },
    .payload_from_spec = [](const codec_spec& s, std::uint64_t n, dtype,
                            std::uint64_t) noexcept { return bucketed_payload(s, n, 2, 1); },
    .payload_from_header = [](const frame_header& h) noexcept -> result<std::uint64_t> {
      return bucketed_payload(h, 2, 1);
    },
    .bounds = [](const codec_spec& s,
                 std::uint64_t n) noexcept { return bucket_mean_bounds(group_of(s, n)); },
};

}  // namespace gradcodec::detail
