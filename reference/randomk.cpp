// SPDX-License-Identifier: Apache-2.0
//! @file
//! Reference random-k (docs/codecs.md "randomk"): one index drawn in each of k equal
//! strata from the shared counter generator, so indices are not sent; the payload holds
//! the generator's 16 bytes of state and the k values.
#include "common.hpp"

namespace gradcodec::reference {
namespace {

__extension__ typedef unsigned __int128 u128;

//! lo_j = floor(j * n / k), exact (j * n reaches 2^96).
std::uint64_t stratum_lo(std::uint64_t j, std::uint64_t n, std::uint64_t k) {
  return static_cast<std::uint64_t>(static_cast<u128>(j) * n / k);
}

struct stratum {
  std::uint64_t lo, size, index;
};

stratum stratum_of(const blocks::counter_rng& rng, std::uint64_t j, std::uint64_t n,
                   std::uint64_t k) {
  stratum s{};
  s.lo = stratum_lo(j, n, k);
  s.size = stratum_lo(j + 1, n, k) - s.lo;
  s.index = s.lo + blocks::scale_u32(rng.at(blocks::rng_stream::selection, j), s.size);
  return s;
}

}  // namespace

std::size_t randomk_workspace(const codec_spec&, const_tensor_view, operation) { return 0; }

status randomk_encode(const detail::encode_call& c) {
  const std::uint64_t n = c.in.n, k = sparse_count(c.spec, n);
  const std::uint64_t vsize = dtype_size(c.wire);
  const blocks::randomk_layout l = blocks::randomk_layout_of(k, vsize);
  if (l.total > c.capacity) return too_small();
  std::memset(c.payload, 0, l.total);
  const auto rng = blocks::counter_rng::make(c.ctx.seed, c.ctx.step, c.ctx.tensor_id);
  put<std::uint32_t>(c.payload + l.key_offset + 0, rng.key.k0);
  put<std::uint32_t>(c.payload + l.key_offset + 4, rng.key.k1);
  put<std::uint32_t>(c.payload + l.key_offset + 8, rng.step_lo);
  put<std::uint32_t>(c.payload + l.key_offset + 12, rng.tensor_lo);
  // Only the k sent values are read: random-k never scans the tensor.
  for (std::uint64_t j = 0; j < k; ++j) {
    const stratum s = stratum_of(rng, j, n, k);
    const float v = load(c.in, s.index);
    if (!finite(v)) c.hdr.flags |= flag_nonfinite;
    const float x = c.spec.unbiased ? v * static_cast<float>(s.size) : v;
    put_value(c.payload + l.values_offset + j * vsize, c.wire, x);
  }
  c.hdr.count = k;
  if (c.spec.unbiased) c.hdr.mode |= mode_unbiased;
  c.hdr.payload_bytes = l.total;
  return {};
}

status randomk_decode(const detail::decode_call& c) {
  const std::uint64_t n = c.hdr.n, k = c.hdr.count;
  // Strata need k >= 1 (the header check already guarantees k <= n).
  if (n > 0 && k == 0) return corrupt("randomk frame with no elements");
  const std::uint64_t vsize = dtype_size(c.hdr.type);
  const blocks::randomk_layout l = blocks::randomk_layout_of(k, vsize);
  blocks::counter_rng rng{};
  rng.key.k0 = get<std::uint32_t>(c.payload + l.key_offset + 0);
  rng.key.k1 = get<std::uint32_t>(c.payload + l.key_offset + 4);
  rng.step_lo = get<std::uint32_t>(c.payload + l.key_offset + 8);
  rng.tensor_lo = get<std::uint32_t>(c.payload + l.key_offset + 12);
  for (std::uint64_t j = 0; j < k; ++j) {
    const stratum s = stratum_of(rng, j, n, k);
    const float x = get_value(c.payload + l.values_offset + j * vsize, c.hdr.type);
    if (c.accumulate) {
      emit(c, s.index, x);
    } else {
      for (std::uint64_t i = s.lo; i < s.lo + s.size; ++i) emit(c, i, i == s.index ? x : 0.0f);
    }
  }
  return {};
}

}  // namespace gradcodec::reference
