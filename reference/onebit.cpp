// SPDX-License-Identifier: Apache-2.0
//! @file
//! Reference 1-bit SGD codec (docs/codecs.md "onebit"; Seide et al. 2014, CNTK's
//! zero-threshold column quantizer applied per bucket): one sign bit per element and two
//! reconstruction values per bucket, the means of its negative and non-negative values.
#include "sign_common.hpp"

namespace gradcodec::reference {

std::size_t onebit_workspace(const codec_spec&, const_tensor_view, operation) { return 0; }

status onebit_encode(const detail::encode_call& c) {
  const auto scales_of = [&](bucketed::span s, prescale p, float* means) {
    const auto v = [&](std::uint64_t i) { return load(c.in, s.begin + i); };
    const float sum_neg =
        canonical_sum(s.len, [&](std::uint64_t i) { return v(i) < 0.0f ? v(i) * p.down : 0.0f; });
    const float sum_pos =
        canonical_sum(s.len, [&](std::uint64_t i) { return v(i) >= 0.0f ? v(i) * p.down : 0.0f; });
    std::uint64_t count_neg = 0;
    for (std::uint64_t i = 0; i < s.len; ++i) count_neg += sign_frame::sign_bit(v(i));
    const std::uint64_t count_pos = s.len - count_neg;
    // An empty group has no mean; 0 keeps the (unused) value harmless.
    means[0] = count_neg > 0 ? (sum_neg / static_cast<float>(count_neg)) * p.up : 0.0f;
    means[1] = count_pos > 0 ? (sum_pos / static_cast<float>(count_pos)) * p.up : 0.0f;
  };
  return sign_frame::encode<2>(c, scales_of);
}

status onebit_decode(const detail::decode_call& c) {
  return sign_frame::decode<2>(
      c, [](const float* means, std::uint32_t bit) { return bit != 0 ? means[0] : means[1]; });
}

}  // namespace gradcodec::reference
