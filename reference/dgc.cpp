// SPDX-License-Identifier: Apache-2.0
//! @file
//! Reference DGC (docs/codecs.md "dgc"): a threshold estimated from a strided sample,
//! halved up to three times until at least k elements pass, then exactly k sent (the top k
//! of the candidates, which is the exact top-k). Same payload and decoder as topk.
#include <cmath>

#include "sparse.hpp"

namespace gradcodec::reference {
namespace {

__extension__ typedef unsigned __int128 u128;

constexpr int dgc_rounds = 4;

//! s = min(max(1, ceil(sample * n)), n), in double.
std::uint64_t sample_size(double sample, std::uint64_t n) {
  const double s = std::ceil(sample * static_cast<double>(n));
  return std::min(std::max<std::uint64_t>(1, static_cast<std::uint64_t>(s)), n);
}

//! Candidate test: non-finite, or |v| >= t (t is finite and >= +0.0).
bool candidate(float v, float t) { return !finite(v) || std::fabs(v) >= t; }

}  // namespace

std::size_t dgc_workspace(const codec_spec& spec, const_tensor_view shape, operation op) {
  if (op != operation::encode && op != operation::encode_with_feedback) return 0;
  // Candidate indices (u64, at most n), then the sample's keys (u32, s of them).
  return shape.n * sizeof(std::uint64_t) +
         sample_size(spec.sample, shape.n) * sizeof(std::uint32_t);
}

status dgc_encode(const detail::encode_call& c) {
  const std::uint64_t n = c.in.n, k = sparse_count(c.spec, n);
  const blocks::sparse_layout l = sparse::layout_of(c, k);
  if (l.total > c.capacity) return too_small();
  c.hdr.param = static_cast<float>(c.spec.sample);
  if (n == 0) {
    sparse::write_payload(c, l, 0, [](std::uint64_t j) { return j; });
    return {};
  }
  for (std::uint64_t i = 0; i < n; ++i)
    if (!finite(load(c.in, i))) c.hdr.flags |= flag_nonfinite;

  // Strided sample from a random start, and its ks-th largest key.
  const std::uint64_t s = sample_size(c.spec.sample, n);
  const std::uint64_t stride = n / s;
  const auto rng = blocks::counter_rng::make(c.ctx.seed, c.ctx.step, c.ctx.tensor_id);
  const std::uint64_t start = blocks::scale_u32(rng.at(blocks::rng_stream::sampling, 0), stride);
  auto* idx = reinterpret_cast<std::uint64_t*>(c.workspace.data());
  auto* keys = reinterpret_cast<std::uint32_t*>(c.workspace.data() + n * sizeof(std::uint64_t));
  // Non-finite values are candidates at any threshold, so they must not raise it: their
  // sample key is 0. Every sample key is then the bits of a finite |v|.
  for (std::uint64_t j = 0; j < s; ++j) {
    const float v = load(c.in, start + j * stride);
    keys[j] = finite(v) ? sparse::key_of(v) : 0u;
  }
  const auto ks_exact = (static_cast<u128>(k) * s + (n - 1)) / n;  // ceil(k * s / n)
  const std::uint64_t ks = std::max<std::uint64_t>(1, static_cast<std::uint64_t>(ks_exact));
  std::nth_element(keys, keys + (ks - 1), keys + s,
                   [](std::uint32_t a, std::uint32_t b) { return a > b; });
  float t = blocks::bits_float(keys[ks - 1]);

  std::uint64_t m = 0;
  for (int round = 0; round < dgc_rounds; ++round) {
    if (round > 0) t = t * 0.5f;
    m = 0;
    for (std::uint64_t i = 0; i < n; ++i)
      if (candidate(load(c.in, i), t)) ++m;
    if (m >= k) {
      // Every non-candidate has a smaller key than every candidate: this is the exact top-k.
      std::uint64_t at = 0;
      for (std::uint64_t i = 0; i < n; ++i)
        if (candidate(load(c.in, i), t)) idx[at++] = i;
      sparse::select_top(idx, m, k, c.in);
      sparse::write_payload(c, l, k, [idx](std::uint64_t j) { return idx[j]; });
      return {};
    }
  }
  // Fallback: all m candidates plus the lowest-index non-candidates, k in all.
  const std::uint64_t fill = k - m;
  std::uint64_t at = 0, filled = 0;
  for (std::uint64_t i = 0; i < n && at < k; ++i) {
    if (candidate(load(c.in, i), t)) {
      idx[at++] = i;
    } else if (filled < fill) {
      idx[at++] = i;
      ++filled;
    }
  }
  sparse::write_payload(c, l, k, [idx](std::uint64_t j) { return idx[j]; });
  return {};
}

status dgc_decode(const detail::decode_call& c) {
  if (c.hdr.n > 0 && c.hdr.count == 0) return corrupt("dgc frame with no elements");
  return sparse::decode(c);
}

}  // namespace gradcodec::reference
