// SPDX-License-Identifier: Apache-2.0
//! @file
//! Reference min-max quantization (docs/codecs.md "minmax"): per bucket (lo, hi), each value
//! sent as one of 2^b evenly spaced levels between them, rounded to nearest or
//! stochastically (unbiased). Everything is computed on values prescaled by a power of two
//! of the bucket (prescale_for(max(|lo|, |hi|))): ranges up to 2 * FLT_MAX stay finite and
//! subnormal buckets keep full precision.
#include <limits>

#include "bucket.hpp"

namespace gradcodec::reference {

std::size_t minmax_workspace(const codec_spec&, const_tensor_view, operation) { return 0; }

status minmax_encode(const detail::encode_call& c) {
  const std::uint64_t n = c.in.n;
  const std::uint32_t bits = c.spec.bits;
  const std::uint32_t levels = (1u << bits) - 1u;  // L
  const bool stochastic = c.spec.rounding == rounding_mode::stochastic;
  const blocks::bucket_layout l = blocks::bucket_layout_of(n, c.spec.bucket, 2, bits);
  if (!bucketed::begin_payload(c, l)) return too_small();
  const auto rng = blocks::counter_rng::make(c.ctx.seed, c.ctx.step, c.ctx.tensor_id);
  std::byte* codes = c.payload + l.codes_offset;

  for (std::uint64_t b = 0; b < l.buckets; ++b) {
    const bucketed::span sp = bucketed::bucket_at(n, c.spec.bucket, b);
    const bucketed::scan_result m = bucketed::scan(c.in, sp);
    if (!m.finite) {
      // Codes stay 0; NaN lo and hi make every element NaN on decode.
      bucketed::put_scale(c.payload, l, 2, b, 0, bucketed::canonical_nan());
      bucketed::put_scale(c.payload, l, 2, b, 1, bucketed::canonical_nan());
      c.hdr.flags |= flag_nonfinite;
      continue;
    }
    // + 0.0f turns -0.0 into +0.0, so lo and hi do not depend on the scan order.
    float lo = std::numeric_limits<float>::infinity();
    float hi = -std::numeric_limits<float>::infinity();
    for (std::uint64_t i = sp.begin; i < sp.begin + sp.len; ++i) {
      const float v = load(c.in, i) + 0.0f;
      if (v < lo) lo = v;
      if (v > hi) hi = v;
    }
    bucketed::put_scale(c.payload, l, 2, b, 0, lo);
    bucketed::put_scale(c.payload, l, 2, b, 1, hi);
    const prescale p = prescale_for(std::max(std::fabs(lo), std::fabs(hi)));
    const float lo_d = lo * p.down;
    const float h_d = hi * p.down - lo_d;
    if (h_d == 0.0f) continue;  // constant bucket: all codes 0 decode to lo
    const float inv = static_cast<float>(levels) / h_d;
    for (std::uint64_t i = sp.begin; i < sp.begin + sp.len; ++i) {
      const float t = (load(c.in, i) * p.down - lo_d) * inv;
      std::uint32_t q = stochastic
                            ? bucketed::stochastic_level(t, bucketed::rounding_uniform(rng, i))
                            : bucketed::nearest_level(t);
      put_bits(codes, i, bits, std::min(q, levels));
    }
  }
  c.hdr.group = c.spec.bucket;
  c.hdr.level = static_cast<std::uint16_t>(bits);
  c.hdr.mode = stochastic ? mode_stochastic : 0;
  c.hdr.payload_bytes = l.total;
  return {};
}

status minmax_decode(const detail::decode_call& c) {
  const std::uint64_t n = c.hdr.n;
  const std::uint32_t bits = c.hdr.level;
  const float fl = static_cast<float>((1u << bits) - 1u);
  const blocks::bucket_layout l = blocks::bucket_layout_of(n, c.hdr.group, 2, bits);
  const std::byte* codes = c.payload + l.codes_offset;
  // Every b-bit code is a level and every (lo, hi) pair decodes to a defined value:
  // nothing in the payload needs validating.
  for (std::uint64_t b = 0; b < l.buckets; ++b) {
    const bucketed::span sp = bucketed::bucket_at(n, c.hdr.group, b);
    const float lo = bucketed::get_scale(c.payload, l, 2, b, 0);
    const float hi = bucketed::get_scale(c.payload, l, 2, b, 1);
    const prescale p = prescale_for(std::max(std::fabs(lo), std::fabs(hi)));
    const float lo_d = lo * p.down;
    const float step = (hi * p.down - lo_d) / fl;
    for (std::uint64_t i = sp.begin; i < sp.begin + sp.len; ++i) {
      const float q = static_cast<float>(get_bits(codes, i, bits));
      float x = std::fma(q, step, lo_d) * p.up;
      // Rounding can step just past hi (to +Inf when hi is near FLT_MAX), or below lo when
      // lo * down was subnormal: clamp to the bucket's range. A NaN x stays NaN.
      if (x < lo) x = lo;
      if (x > hi) x = hi;
      emit(c, i, x);
    }
  }
  return {};
}

}  // namespace gradcodec::reference
