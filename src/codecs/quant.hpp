// SPDX-License-Identifier: Apache-2.0
//! @file
//! What the bucketed quantizers' descriptors share (qsgd, terngrad, minmax, onebit, sign):
//! the payload of a bucketed frame and the header's bucket.
#pragma once

#include <cstdint>

#include "gradcodec/blocks/layout.hpp"
#include "src/codecs/descriptor.hpp"
#include "src/codecs/error_bounds.hpp"

namespace gradcodec::detail {

//! Codes of `bits` per element and `scales` f32 per bucket, the spec's or the header's.
inline std::uint64_t bucketed_payload(const codec_spec& s, std::uint64_t n, unsigned scales,
                                      std::uint32_t bits) {
  return blocks::bucket_layout_of(n, s.bucket, scales, bits).total;
}

inline std::uint64_t bucketed_payload(const frame_header& h, unsigned scales, std::uint32_t bits) {
  return blocks::bucket_layout_of(h.n, h.group, scales, bits).total;
}

//! Two means (onebit) or the mean |x| (sign) per bucket of B: the kept energy is at least
//! ||x||^2/B, and no element errs by more than (1 - 1/B) max|x|.
inline codec_bounds bucket_mean_bounds(double B) {
  return quantizer_bounds(false, 1 - 1 / B, 1 - 1 / B,
                          "contraction 1/bucket: the residual may grow to bucket - 1 times the "
                          "gradient");
}

}  // namespace gradcodec::detail
