// SPDX-License-Identifier: Apache-2.0
//! @file
//! Reference top-k (docs/codecs.md "topk"): the k elements of largest key (|v|, NaN above
//! +Inf, ties to the lower index), sent as values then ascending indices.
#include "sparse.hpp"

namespace gradcodec::reference {

std::size_t topk_workspace(const codec_spec& spec, const_tensor_view shape, operation op) {
  if (op != operation::encode && op != operation::encode_with_feedback) return 0;
  // An index array for the selection; none when every element is sent.
  return sparse_count(spec, shape.n) < shape.n ? shape.n * sizeof(std::uint64_t) : 0;
}

status topk_encode(const detail::encode_call& c) {
  const std::uint64_t n = c.in.n, k = sparse_count(c.spec, n);
  const blocks::sparse_layout l = sparse::layout_of(c, k);
  if (l.total > c.capacity) return too_small();
  for (std::uint64_t i = 0; i < n; ++i)
    if (!finite(load(c.in, i))) c.hdr.flags |= flag_nonfinite;
  if (k == n) {
    sparse::write_payload(c, l, k, [](std::uint64_t j) { return j; });
    return {};
  }
  auto* idx = reinterpret_cast<std::uint64_t*>(c.workspace.data());
  for (std::uint64_t i = 0; i < n; ++i) idx[i] = i;
  sparse::select_top(idx, n, k, c.in);
  sparse::write_payload(c, l, k, [idx](std::uint64_t j) { return idx[j]; });
  return {};
}

status topk_decode(const detail::decode_call& c) {
  // An encoder always sends k >= 1 of n >= 1 elements.
  if (c.hdr.n > 0 && c.hdr.count == 0) return corrupt("topk frame with no elements");
  return sparse::decode(c);
}

}  // namespace gradcodec::reference
