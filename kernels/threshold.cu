// SPDX-License-Identifier: Apache-2.0
//! @file
//! Hard threshold on the GPU (docs/codecs.md "threshold"): every candidate (non-finite or
//! |v| >= tau) in index order, or with a binding cap the cap top candidates (the radix
//! select of select.cuh restricted to candidates). The frame's size depends on the count,
//! so encode counts on the device and waits for that number (the one host wait of this
//! codec), checks the output's capacity, then selects and compacts.
#include "codecs.hpp"
#include "select.cuh"

namespace gradcodec::cuda {

namespace {

status encode_impl(const detail::encode_call& c, tensor_view residual) {
  const std::uint64_t n = c.in.n;
  const float tau = c.spec.tau;
  auto e = sparse_begin(c, residual);
  if (!e) return e.error();
  const select_space& sp = e.value().sp;
  auto candidates = count_candidates(sp, e.value().v, n, tau, status_of(c.workspace), c.stream);
  if (!candidates) return candidates.error();
  const bool capped = c.spec.cap > 0 && candidates.value() > c.spec.cap;
  const std::uint64_t m = capped ? c.spec.cap : candidates.value();
  if (auto st = check_sparse_capacity(c, m); !st.ok()) return st;
  if (m > 0) {
    // Uncapped: T = 0 and need = m take every candidate (their keys are >= 0).
    if (auto st = select_rule_init(sp.rule, tau, m, c.stream); !st.ok()) return st;
    if (capped)
      if (auto st = select_radix(sp, sp.rule, e.value().v, n, nullptr, c.stream); !st.ok())
        return st;
  }
  c.hdr.param = tau;
  return sparse_end(c, e.value(), m, residual);
}

}  // namespace

std::size_t threshold_workspace(const codec_spec&, const_tensor_view shape, operation op) {
  return sparse_workspace(shape.n, op, 0);
}

status threshold_encode(const detail::encode_call& c) { return encode_impl(c, {}); }

status threshold_encode_feedback(const detail::feedback_call& c) {
  return encode_impl(c.enc, c.residual);
}

status threshold_decode(const detail::decode_call& c) { return sparse_decode(c); }

}  // namespace gradcodec::cuda
