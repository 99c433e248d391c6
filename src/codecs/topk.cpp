// SPDX-License-Identifier: Apache-2.0
//! @file
//! top-k: the k largest magnitudes, ties to the lower index (docs/codecs.md, "topk").
#include <array>

#include "src/codecs/descriptor.hpp"
#include "src/codecs/error_bounds.hpp"
#include "src/codecs/sparse.hpp"

namespace gradcodec::detail {
namespace {

constexpr std::array params{
    param_info{"ratio", "0.07", "(0, 1]", "kept fraction: k = max(1, floor(ratio*n))"}, param_k,
    param_nonfinite};

codec_bounds topk_bounds(const codec_spec& s, std::uint64_t n) noexcept {
  // The k largest magnitudes hold at least k/n of the energy.
  const double share = n == 0 ? (s.k > 0 ? 0.0 : s.ratio)
                              : static_cast<double>(sparse_count(s, n)) / static_cast<double>(n);
  codec_bounds b = subset_bounds(1 - share, "contraction: the k largest keep >= k/n of ||x||^2");
  b.feedback_safe = true;  // 1 - k/n < 1 for every n, also in the limit k fixed, n large
  return b;
}

}  // namespace

extern constinit const codec_descriptor topk_descriptor{
    .info = {codec_id::topk,
             "topk",
             "exact top-k by magnitude, ties to the lower index",
             "64*k/n (u32 indices)",
             false,
             params,
             selection_fields,
             {.two_phase = true}},
    .defaults = [](codec_spec& s) noexcept { s.ratio = 0.07; },
    .check = check_ratio,
    .print = print_count,
    .payload_from_spec =
        [](const codec_spec& s, std::uint64_t n, dtype type, std::uint64_t) noexcept {
          return indexed_payload(sparse_count(s, n), n, type);
        },
    .payload_from_header = [](const frame_header& h) noexcept { return indexed_payload(h); },
    .spec_from_header = [](const frame_header& h, codec_spec& s) noexcept { s.k = h.count; },
    .bounds = topk_bounds,
};

}  // namespace gradcodec::detail
