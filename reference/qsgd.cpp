// SPDX-License-Identifier: Apache-2.0
//! @file
//! Reference QSGD (docs/codecs.md "qsgd"): per bucket one norm (L2 or max |v|), each value
//! rounded to one of 2s+1 signed levels of norm/s, stochastically (unbiased) or to nearest.
#include <limits>

#include "bucket.hpp"
#include "gradcodec/blocks/quant.hpp"

namespace gradcodec::reference {

namespace {

//! The bucket norm of a finite bucket whose largest |v| is m.
float bucket_norm(const_tensor_view in, bucketed::span sp, float m, bool max_norm) {
  if (max_norm) return m;
  const prescale p = prescale_for(m);
  const float sum = canonical_sum(sp.len, [&](std::uint64_t j) {
    const float t = load(in, sp.begin + j) * p.down;
    return t * t;
  });
  const float norm = std::sqrt(sum) * p.up;
  // sqrt(len) * FLT_MAX overflows; FLT_MAX still bounds every |v|, so levels stay in range
  // and decoding stays finite (and unbiased, since the encoder uses the same norm).
  return std::isinf(norm) ? std::numeric_limits<float>::max() : norm;
}

}  // namespace

std::size_t qsgd_workspace(const codec_spec&, const_tensor_view, operation) { return 0; }

status qsgd_encode(const detail::encode_call& c) {
  const std::uint64_t n = c.in.n;
  const std::uint32_t s = c.spec.levels;
  const std::uint32_t bits = blocks::qsgd_code_bits(s);
  const bool stochastic = c.spec.rounding == rounding_mode::stochastic;
  const bool max_norm = c.spec.norm == norm_kind::max;
  const blocks::bucket_layout l = blocks::bucket_layout_of(n, c.spec.bucket, 1, bits);
  if (!bucketed::begin_payload(c, l)) return too_small();
  const auto rng = blocks::counter_rng::make(c.ctx.seed, c.ctx.step, c.ctx.tensor_id);
  std::byte* codes = c.payload + l.codes_offset;

  for (std::uint64_t b = 0; b < l.buckets; ++b) {
    const bucketed::span sp = bucketed::bucket_at(n, c.spec.bucket, b);
    const bucketed::scan_result m = bucketed::scan(c.in, sp);
    float norm;
    if (!m.finite) {
      norm = bucketed::canonical_nan();
      c.hdr.flags |= flag_nonfinite;
    } else {
      norm = bucket_norm(c.in, sp, m.max_abs, max_norm);
    }
    bucketed::put_scale(c.payload, l, 1, b, 0, norm);
    if (!m.finite || norm == 0.0f) {
      for (std::uint64_t i = sp.begin; i < sp.begin + sp.len; ++i) put_bits(codes, i, bits, s);
      continue;
    }
    const bucketed::ratio to_level = bucketed::ratio_for(norm, static_cast<float>(s));
    for (std::uint64_t i = sp.begin; i < sp.begin + sp.len; ++i) {
      const float v = load(c.in, i);
      const float r = to_level(std::fabs(v));
      std::uint32_t lv = stochastic
                             ? bucketed::stochastic_level(r, bucketed::rounding_uniform(rng, i))
                             : bucketed::nearest_level(r);
      lv = std::min(lv, s);
      // -0.0 is not < 0: it takes the +0 level, like +0.0.
      const std::uint32_t code = v < 0.0f ? s - lv : s + lv;
      put_bits(codes, i, bits, code);
    }
  }
  c.hdr.group = c.spec.bucket;
  c.hdr.level = static_cast<std::uint16_t>(s);
  c.hdr.mode = static_cast<std::uint8_t>((stochastic ? mode_stochastic : 0) |
                                         (max_norm ? mode_norm_max : 0));
  c.hdr.payload_bytes = l.total;
  return {};
}

status qsgd_decode(const detail::decode_call& c) {
  const std::uint64_t n = c.hdr.n;
  const std::uint32_t s = c.hdr.level;
  const std::uint32_t bits = blocks::qsgd_code_bits(s);
  const float fs = static_cast<float>(s);
  const blocks::bucket_layout l = blocks::bucket_layout_of(n, c.hdr.group, 1, bits);
  const std::byte* codes = c.payload + l.codes_offset;
  // Any scale and any code decode to a defined value (codes above 2s are clamped), and the
  // header fixed every size: nothing in the payload needs validating.
  for (std::uint64_t b = 0; b < l.buckets; ++b) {
    const bucketed::span sp = bucketed::bucket_at(n, c.hdr.group, b);
    const float norm = bucketed::get_scale(c.payload, l, 1, b, 0);
    // The level spacing norm / s in the prescaled domain of the encoder's ratio: normal
    // even when norm / s itself would be subnormal, so no precision is lost there.
    const prescale p = prescale_for(norm);
    const float nd = norm * p.down;
    float step = nd / fs;
    // Rounded up, s * step could exceed nd (and the result overflow when norm is near
    // FLT_MAX): one ulp down keeps |q * step| <= nd for every level.
    if (step > 0.0f && step * fs > nd) step = blocks::bits_float(blocks::float_bits(step) - 1u);
    for (std::uint64_t i = sp.begin; i < sp.begin + sp.len; ++i) {
      const std::uint32_t code = std::min(get_bits(codes, i, bits), 2u * s);
      const float q =
          static_cast<float>(static_cast<std::int32_t>(code) - static_cast<std::int32_t>(s));
      emit(c, i, (q * step) * p.up);
    }
  }
  return {};
}

}  // namespace gradcodec::reference
