// SPDX-License-Identifier: Apache-2.0
//! @file
//! The bucketed 1-bit frame shared by the reference sign and onebit codecs
//! (docs/codecs.md "sign", "onebit"; docs/format.md "sign, onebit"): per bucket `Scales`
//! f32 values, then one bit per element (1 = the value is < 0). Only how a finite bucket's
//! scales are computed and how a (scales, bit) pair decodes differ between the two codecs.
#pragma once

#include "common.hpp"

namespace gradcodec::reference::sign_frame {

//! The canonical quiet NaN stored as every scale of a bucket that held NaN or Inf.
inline constexpr std::uint32_t nan_bits = 0x7FC00000u;
inline float canonical_nan() { return blocks::bits_float(nan_bits); }

//! The code of one value: +0.0, -0.0 and every positive value are "positive" (bit 0).
inline std::uint32_t sign_bit(float v) { return v < 0.0f ? 1u : 0u; }

//! Elements [begin, begin + len) of bucket b.
struct bucket_span {
  std::uint64_t begin, len;
};
inline bucket_span bucket_at(std::uint64_t n, std::uint64_t bucket, std::uint64_t b) {
  const std::uint64_t begin = b * bucket;
  return {begin, std::min(n - begin, bucket)};
}

//! M = max |v| over the bucket, and whether every value is finite (M is then meaningless).
struct bucket_scan {
  float max_abs;
  bool finite;
};
inline bucket_scan scan(const_tensor_view in, bucket_span s) {
  bucket_scan r{0.0f, true};
  for (std::uint64_t i = s.begin; i < s.begin + s.len; ++i) {
    const float v = load(in, i);
    if (!finite(v)) r.finite = false;
    r.max_abs = std::max(r.max_abs, std::fabs(v));
  }
  return r;
}

//! Encodes with bucket size c.spec.bucket. `scales_of(span, prescale, float* out)` writes the
//! `Scales` scales of a bucket whose values are all finite.
template <std::uint32_t Scales, class ScalesOf>
status encode(const detail::encode_call& c, ScalesOf scales_of) {
  const std::uint64_t n = c.in.n;
  const std::uint64_t bucket = c.spec.bucket;
  const blocks::bucket_layout l = blocks::bucket_layout_of(n, bucket, Scales, 1);
  if (l.total > c.capacity) return too_small();
  // put_bits ORs into the stream, and padding must be zero: clear everything first.
  std::fill(c.payload, c.payload + l.total, std::byte{0});
  std::byte* codes = c.payload + l.codes_offset;
  for (std::uint64_t b = 0; b < l.buckets; ++b) {
    const bucket_span s = bucket_at(n, bucket, b);
    const bucket_scan m = scan(c.in, s);
    float scales[Scales];
    if (!m.finite) {
      // The whole bucket decodes to NaN; its bits stay 0.
      std::fill(scales, scales + Scales, canonical_nan());
      c.hdr.flags |= flag_nonfinite;
    } else {
      scales_of(s, prescale_for(m.max_abs), scales);
      for (std::uint64_t i = s.begin; i < s.begin + s.len; ++i)
        put_bits(codes, i, 1, sign_bit(load(c.in, i)));
    }
    for (std::uint32_t k = 0; k < Scales; ++k)
      put<float>(c.payload + l.scales_offset + (b * Scales + k) * 4, scales[k]);
  }
  c.hdr.group = static_cast<std::uint32_t>(bucket);
  c.hdr.payload_bytes = l.total;
  return {};
}

//! Decodes; `value_of(const float* scales, bit)` gives an element's f32 value. Every
//! payload size was checked by the header (peek), and any bit pattern or scale is a valid
//! input, so there is nothing left that could read or write out of bounds.
template <std::uint32_t Scales, class ValueOf>
status decode(const detail::decode_call& c, ValueOf value_of) {
  const std::uint64_t n = c.hdr.n;
  const std::uint64_t bucket = c.hdr.group;
  const blocks::bucket_layout l = blocks::bucket_layout_of(n, bucket, Scales, 1);
  const std::byte* codes = c.payload + l.codes_offset;
  for (std::uint64_t b = 0; b < l.buckets; ++b) {
    const bucket_span s = bucket_at(n, bucket, b);
    float scales[Scales];
    for (std::uint32_t k = 0; k < Scales; ++k)
      scales[k] = get<float>(c.payload + l.scales_offset + (b * Scales + k) * 4);
    for (std::uint64_t i = s.begin; i < s.begin + s.len; ++i)
      emit(c, i, value_of(scales, get_bits(codes, i, 1)));
  }
  return {};
}

}  // namespace gradcodec::reference::sign_frame
