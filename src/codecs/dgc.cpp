// SPDX-License-Identifier: Apache-2.0
//! @file
//! DGC: top-k through a threshold estimated on a sample, exactly k sent (docs/codecs.md,
//! "dgc").
#include <array>

#include "src/codecs/descriptor.hpp"
#include "src/codecs/error_bounds.hpp"
#include "src/codecs/sparse.hpp"

namespace gradcodec::detail {
namespace {

constexpr std::array params{
    param_info{"ratio", "0.07", "(0, 1]", "kept fraction: k = max(1, floor(ratio*n))"}, param_k,
    param_info{"sample", "0.01", "(0, 1]",
               "fraction of elements sampled to estimate the threshold"},
    param_nonfinite};

status check(const codec_spec& s) {
  if (auto st = check_ratio(s); !st.ok()) return st;
  if (!(s.sample > 0.0 && s.sample <= 1.0)) return out_of_range(s, "sample", "(0, 1]");
  return {};
}

codec_bounds dgc_bounds(const codec_spec&, std::uint64_t n) noexcept {
  // Equal to top-k unless the sampled threshold falls back (docs/codecs.md, dgc); the
  // fallback still sends every element >= t_3, so the largest always: >= 1/n.
  codec_bounds b = subset_bounds(n == 0 ? 1.0 : 1 - 1 / static_cast<double>(n),
                                 "contraction: as top-k (k/n of ||x||^2) unless the sampled "
                                 "threshold falls back; the largest element is always sent");
  b.feedback_safe = true;
  return b;
}

}  // namespace

extern constinit const codec_descriptor dgc_descriptor{
    .info = {codec_id::dgc,
             "dgc",
             "DGC sampled-threshold top-k, exactly k sent",
             "64*k/n (u32 indices)",
             false,
             params,
             header_meaning{"items sent", "", "", "sample"},
             {.two_phase = true}},
    .defaults = [](codec_spec& s) noexcept { s.ratio = 0.07; },
    .check = check,
    .print =
        [](const codec_spec& s, spec_printer& out) {
          print_count(s, out);
          out.add_double("sample", s.sample);
        },
    .payload_from_spec =
        [](const codec_spec& s, std::uint64_t n, dtype type, std::uint64_t) noexcept {
          return indexed_payload(sparse_count(s, n), n, type);
        },
    .payload_from_header = [](const frame_header& h) noexcept { return indexed_payload(h); },
    .spec_from_header =
        [](const frame_header& h, codec_spec& s) noexcept {
          s.k = h.count;
          s.sample = h.param;
        },
    .bounds = dgc_bounds,
};

}  // namespace gradcodec::detail
