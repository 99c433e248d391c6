// SPDX-License-Identifier: Apache-2.0
//! @file
//! Reference threshold (docs/codecs.md "threshold"): every element with |v| >= tau or
//! non-finite, optionally capped to the cap largest by key; a variable count m.
#include <cmath>

#include "sparse.hpp"

namespace gradcodec::reference {
namespace {

bool kept(float v, float tau) { return !finite(v) || std::fabs(v) >= tau; }

}  // namespace

std::size_t threshold_workspace(const codec_spec& spec, const_tensor_view shape, operation op) {
  if (op != operation::encode && op != operation::encode_with_feedback) return 0;
  // Candidate indices, needed only when the cap can bind.
  return spec.cap > 0 && spec.cap < shape.n ? shape.n * sizeof(std::uint64_t) : 0;
}

status threshold_encode(const detail::encode_call& c) {
  const std::uint64_t n = c.in.n;
  const float tau = c.spec.tau;
  // Count first: the frame size depends on it, and the capacity is checked before writing.
  std::uint64_t candidates = 0;
  for (std::uint64_t i = 0; i < n; ++i) {
    const float v = load(c.in, i);
    if (!finite(v)) c.hdr.flags |= flag_nonfinite;
    if (kept(v, tau)) ++candidates;
  }
  const bool capped = c.spec.cap > 0 && candidates > c.spec.cap;
  const std::uint64_t m = capped ? c.spec.cap : candidates;
  const blocks::sparse_layout l = sparse::layout_of(c, m);
  if (l.total > c.capacity) return too_small();
  c.hdr.param = tau;
  auto* idx = reinterpret_cast<std::uint64_t*>(c.workspace.data());
  if (capped) {
    std::uint64_t at = 0;
    for (std::uint64_t i = 0; i < n; ++i)
      if (kept(load(c.in, i), tau)) idx[at++] = i;
    sparse::select_top(idx, candidates, m, c.in);
    sparse::write_payload(c, l, m, [idx](std::uint64_t j) { return idx[j]; });
    return {};
  }
  // Uncapped: the j-th kept element in index order, found by one forward walk.
  std::uint64_t next = 0;
  sparse::write_payload(c, l, m, [&](std::uint64_t) {
    while (!kept(load(c.in, next), tau)) ++next;
    return next++;
  });
  return {};
}

status threshold_decode(const detail::decode_call& c) { return sparse::decode(c); }

}  // namespace gradcodec::reference
