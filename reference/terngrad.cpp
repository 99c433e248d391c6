// SPDX-License-Identifier: Apache-2.0
//! @file
//! Reference TernGrad (docs/codecs.md "terngrad"): per bucket a scale s = max |w| (w = v,
//! or v clipped at clip * sigma), and each element sent as s * {-1, 0, +1}, nonzero with
//! probability |w| / s: unbiased with respect to w.
#include <limits>

#include "bucket.hpp"

namespace gradcodec::reference {

namespace {

constexpr std::uint32_t code_bits = 2;
constexpr std::uint32_t code_plus = 1;   // 01
constexpr std::uint32_t code_minus = 3;  // 11

//! The clip bound c = clip * sigma of a finite bucket whose largest |v| is m.
float clip_bound(const_tensor_view in, bucketed::span sp, float m, float clip) {
  const prescale p = prescale_for(m);
  const float len = static_cast<float>(sp.len);
  const float mean =
      canonical_sum(sp.len, [&](std::uint64_t j) { return load(in, sp.begin + j) * p.down; }) / len;
  const float var = canonical_sum(sp.len,
                                  [&](std::uint64_t j) {
                                    const float d = load(in, sp.begin + j) * p.down - mean;
                                    return d * d;
                                  }) /
                    len;
  const float sigma = std::sqrt(var) * p.up;
  // May round to +Inf for huge buckets: then nothing is clipped, which is what it means.
  return clip * sigma;
}

float clipped(float v, float c) { return v < -c ? -c : (v > c ? c : v); }

}  // namespace

std::size_t terngrad_workspace(const codec_spec&, const_tensor_view, operation) { return 0; }

status terngrad_encode(const detail::encode_call& c) {
  const std::uint64_t n = c.in.n;
  const float clip = c.spec.clip;
  const blocks::bucket_layout l = blocks::bucket_layout_of(n, c.spec.bucket, 1, code_bits);
  if (!bucketed::begin_payload(c, l)) return too_small();
  const auto rng = blocks::counter_rng::make(c.ctx.seed, c.ctx.step, c.ctx.tensor_id);
  std::byte* codes = c.payload + l.codes_offset;

  for (std::uint64_t b = 0; b < l.buckets; ++b) {
    const bucketed::span sp = bucketed::bucket_at(n, c.spec.bucket, b);
    const bucketed::scan_result m = bucketed::scan(c.in, sp);
    if (!m.finite) {
      // Codes stay 00 (zero); the NaN scale turns every element into NaN on decode.
      bucketed::put_scale(c.payload, l, 1, b, 0, bucketed::canonical_nan());
      c.hdr.flags |= flag_nonfinite;
      continue;
    }
    // Without clipping w = v (c = +Inf). With it, max |w| = min(M, c) exactly.
    const float cb = clip > 0.0f ? clip_bound(c.in, sp, m.max_abs, clip)
                                 : std::numeric_limits<float>::infinity();
    const float s = std::min(m.max_abs, cb);
    bucketed::put_scale(c.payload, l, 1, b, 0, s);
    if (s == 0.0f) continue;  // every w is +-0: all codes 00
    const bucketed::ratio prob = bucketed::ratio_for(s, 1.0f);
    for (std::uint64_t i = sp.begin; i < sp.begin + sp.len; ++i) {
      const float w = clipped(load(c.in, i), cb);
      if (bucketed::rounding_uniform(rng, i) < prob(std::fabs(w)))
        put_bits(codes, i, code_bits, w < 0.0f ? code_minus : code_plus);
    }
  }
  c.hdr.group = c.spec.bucket;
  c.hdr.param = clip;
  c.hdr.payload_bytes = l.total;
  return {};
}

status terngrad_decode(const detail::decode_call& c) {
  const std::uint64_t n = c.hdr.n;
  const blocks::bucket_layout l = blocks::bucket_layout_of(n, c.hdr.group, 1, code_bits);
  const std::byte* codes = c.payload + l.codes_offset;
  // Every scale and code decodes to a defined value (10 reads as 0): nothing to validate.
  for (std::uint64_t b = 0; b < l.buckets; ++b) {
    const bucketed::span sp = bucketed::bucket_at(n, c.hdr.group, b);
    const float s = bucketed::get_scale(c.payload, l, 1, b, 0);
    for (std::uint64_t i = sp.begin; i < sp.begin + sp.len; ++i) {
      const std::uint32_t code = get_bits(codes, i, code_bits);
      const float t = (code & 1u) ? ((code & 2u) ? -1.0f : 1.0f) : 0.0f;
      // t * s, not a select: a NaN scale makes every element NaN, including t = 0.
      emit(c, i, t * s);
    }
  }
  return {};
}

}  // namespace gradcodec::reference
