// SPDX-License-Identifier: Apache-2.0
//! @file
//! The bucketed 1-bit frame shared by the reference sign and onebit codecs
//! (docs/codecs.md "sign", "onebit"; docs/format.md "sign, onebit"): per bucket `Scales`
//! f32 values, then one bit per element (1 = the value is < 0). Only how a finite bucket's
//! scales are computed and how a (scales, bit) pair decodes differ between the two codecs.
#pragma once

#include "bucket.hpp"

namespace gradcodec::reference::sign_frame {

//! The code of one value: +0.0, -0.0 and every positive value are "positive" (bit 0).
inline std::uint32_t sign_bit(float v) { return v < 0.0f ? 1u : 0u; }

//! Encodes with bucket size c.spec.bucket. `scales_of(span, prescale, float* out)` writes the
//! `Scales` scales of a bucket whose values are all finite.
template <std::uint32_t Scales, class ScalesOf>
status encode(const detail::encode_call& c, ScalesOf scales_of) {
  const std::uint64_t n = c.in.n;
  const std::uint64_t bucket = c.spec.bucket;
  const blocks::bucket_layout l = blocks::bucket_layout_of(n, bucket, Scales, 1);
  if (!bucketed::begin_payload(c, l)) return too_small();
  std::byte* codes = c.payload + l.codes_offset;
  for (std::uint64_t b = 0; b < l.buckets; ++b) {
    const bucketed::span s = bucketed::bucket_at(n, bucket, b);
    const bucketed::scan_result m = bucketed::scan(c.in, s);
    float scales[Scales] = {};
    if (!m.finite) {
      // The whole bucket decodes to NaN; its bits stay 0.
      std::fill(scales, scales + Scales, bucketed::canonical_nan());
      c.hdr.flags |= flag_nonfinite;
    } else {
      scales_of(s, prescale_for(m.max_abs), scales);
      for (std::uint64_t i = s.begin; i < s.begin + s.len; ++i)
        put_bits(codes, i, 1, sign_bit(load(c.in, i)));
    }
    for (std::uint32_t k = 0; k < Scales; ++k)
      bucketed::put_scale(c.payload, l, Scales, b, k, scales[k]);
  }
  c.hdr.group = static_cast<std::uint32_t>(bucket);
  c.hdr.payload_bytes = l.total;
  return {};
}

//! Decodes; `value_of(const float* scales, bit)` gives an element's f32 value. Every
//! payload size was checked with the header (peek), and any bit pattern or scale is a
//! valid input, so nothing in the payload can lead out of bounds.
template <std::uint32_t Scales, class ValueOf>
status decode(const detail::decode_call& c, ValueOf value_of) {
  const std::uint64_t n = c.hdr.n;
  const std::uint64_t bucket = c.hdr.group;
  const blocks::bucket_layout l = blocks::bucket_layout_of(n, bucket, Scales, 1);
  const std::byte* codes = c.payload + l.codes_offset;
  for (std::uint64_t b = 0; b < l.buckets; ++b) {
    const bucketed::span s = bucketed::bucket_at(n, bucket, b);
    float scales[Scales];
    for (std::uint32_t k = 0; k < Scales; ++k)
      scales[k] = bucketed::get_scale(c.payload, l, Scales, b, k);
    for (std::uint64_t i = s.begin; i < s.begin + s.len; ++i)
      emit(c, i, value_of(scales, get_bits(codes, i, 1)));
  }
  return {};
}

}  // namespace gradcodec::reference::sign_frame
