// SPDX-License-Identifier: Apache-2.0
//! @file
//! random-k: one element per stratum, chosen from the shared seed, values only
//! (docs/codecs.md, "randomk").
#include <array>
#include <cmath>

#include "src/codecs/descriptor.hpp"
#include "src/codecs/error_bounds.hpp"
#include "src/codecs/sparse.hpp"

namespace gradcodec::detail {
namespace {

constexpr std::array params{
    param_info{"ratio", "0.5", "(0, 1]", "kept fraction: k = max(1, floor(ratio*n))"}, param_k,
    param_info{"unbiased", "0", "0|1", "scale each kept value by its stratum size (unbiased)"},
    param_nonfinite};

codec_bounds randomk_bounds(const codec_spec& s, std::uint64_t n) noexcept {
  // One element per stratum of m <= ceil(n/k) elements, each with probability 1/m.
  const double m =
      n == 0 ? (s.k > 0 ? no_bound : std::ceil(1 / s.ratio))
             : std::ceil(static_cast<double>(n) / static_cast<double>(sparse_count(s, n)));
  if (s.unbiased)
    return quantizer_bounds(true, m - 1, std::max(1.0, m - 1),
                            "unbiased: variance m-1 for strata of m elements; error "
                            "feedback has gain >= 1 once m >= 2");
  codec_bounds b = subset_bounds(1 - 1 / m,
                                 "contraction in expectation: each stratum of m "
                                 "elements keeps one, so E keeps >= 1/m of ||x||^2");
  b.feedback_safe = true;
  return b;
}

}  // namespace

extern constinit const codec_descriptor randomk_descriptor{
    .info = {codec_id::randomk,
             "randomk",
             "stratified random-k from the shared seed, values only",
             "32*k/n",
             false,
             params,
             selection_fields,
             {.dense = true}},
    .modes = mode_unbiased,
    .defaults = [](codec_spec& s) noexcept { s.ratio = 0.5; },
    .check = check_ratio,
    .print =
        [](const codec_spec& s, spec_printer& out) {
          print_count(s, out);
          out.add_flag("unbiased", s.unbiased);
        },
    .payload_from_spec =
        [](const codec_spec& s, std::uint64_t n, dtype type, std::uint64_t) noexcept {
          return blocks::randomk_layout_of(sparse_count(s, n), dtype_size(type)).total;
        },
    .payload_from_header = [](const frame_header& h) noexcept -> result<std::uint64_t> {
      if (h.count > h.n) return corrupt_frame("count above n");
      return blocks::randomk_layout_of(h.count, dtype_size(h.type)).total;
    },
    .spec_from_header =
        [](const frame_header& h, codec_spec& s) noexcept {
          s.k = h.count;
          s.unbiased = (h.mode & mode_unbiased) != 0;
        },
    .mode_names =
        [](std::uint8_t mode, std::string& out) {
          append_name(out, mode & mode_unbiased ? "unbiased" : "biased");
        },
    .bounds = randomk_bounds,
};

}  // namespace gradcodec::detail
