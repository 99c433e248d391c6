// SPDX-License-Identifier: Apache-2.0
//! @file
//! Exact top-k on the GPU (docs/codecs.md "topk"): the radix select and tiled compaction
//! of select.cuh over every element (tau = 0), on the caller's stream without a host wait.
//! Error feedback: p = g + e into the workspace, top-k of p, then residual = p - decoded.
#include "codecs.hpp"
#include "select.cuh"

namespace gradcodec::cuda {

namespace {

status encode_impl(const detail::encode_call& c, tensor_view residual) {
  const std::uint64_t n = c.in.n, k = sparse_count(c.spec, n);
  if (auto st = check_sparse_capacity(c, k); !st.ok()) return st;
  auto e = sparse_begin(c, residual);
  if (!e) return e.error();
  const select_space& sp = e.value().sp;
  if (k > 0) {
    if (auto st = select_rule_init(sp.rule, 0.0f, k, c.stream); !st.ok()) return st;
    if (auto st = select_radix(sp, sp.rule, e.value().v, n, status_of(c.workspace), c.stream);
        !st.ok())
      return st;
  }
  return sparse_end(c, e.value(), k, residual);
}

}  // namespace

std::size_t topk_workspace(const codec_spec&, const_tensor_view shape, operation op) {
  return sparse_workspace(shape.n, op, 0);
}

status topk_encode(const detail::encode_call& c) { return encode_impl(c, {}); }

status topk_encode_feedback(const detail::feedback_call& c) {
  return encode_impl(c.enc, c.residual);
}

status topk_decode(const detail::decode_call& c) { return sparse_decode(c); }

}  // namespace gradcodec::cuda
