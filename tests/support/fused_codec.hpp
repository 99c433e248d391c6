// SPDX-License-Identifier: Apache-2.0
//! @file
//! What a user's own kernel does with the public building blocks: quantize one bucket of
//! values it computes itself (here: a gradient times a factor, as a pre-division by the
//! rank count fused into the encode) straight into a payload, and decode-accumulate one
//! bucket of a payload. Written only against include/gradcodec/blocks/, __host__
//! __device__, so the same code runs in tests/test_blocks_fused.cpp on the CPU and in
//! tests/cuda/fused_kernel_test.cu on a GPU; both compare with the library's encode.
#pragma once

#include <cstdint>

#include "gradcodec/blocks/bitstream.hpp"
#include "gradcodec/blocks/float16.hpp"
#include "gradcodec/blocks/layout.hpp"
#include "gradcodec/blocks/philox.hpp"
#include "gradcodec/blocks/quant.hpp"
#include "gradcodec/blocks/sign.hpp"
#include "gradcodec/codec.hpp"

namespace gradcodec::test::fused {

//! The codec parameters a fused kernel is compiled or launched with.
struct params {
  codec_id codec = codec_id::qsgd;
  std::uint32_t bucket = 512;
  std::uint32_t levels = 7;             //!< qsgd
  std::uint32_t bits = 4;               //!< minmax
  bool stochastic = true;               //!< qsgd, minmax
  bool max_norm = false;                //!< qsgd
  float clip = 0.0f;                    //!< terngrad
  scale_kind scale = scale_kind::none;  //!< sign
};

//! The parameters of a parsed spec (host code).
inline params params_of(const codec_spec& s) {
  params p;
  p.codec = s.id;
  p.bucket = s.bucket;
  p.levels = s.levels;
  p.bits = s.bits;
  p.stochastic = s.rounding == rounding_mode::stochastic;
  p.max_norm = s.norm == norm_kind::max;
  p.clip = s.clip;
  p.scale = s.scale;
  return p;
}

GRADCODEC_HD std::uint32_t scales_per_bucket(const params& p) {
  return p.codec == codec_id::minmax || p.codec == codec_id::onebit ? 2u : 1u;
}
GRADCODEC_HD std::uint32_t code_bits(const params& p) {
  switch (p.codec) {
    case codec_id::qsgd: return blocks::qsgd_code_bits(p.levels);
    case codec_id::terngrad: return blocks::terngrad_code_bits;
    case codec_id::minmax: return p.bits;
    default: return 1;
  }
}
GRADCODEC_HD blocks::bucket_layout layout_of(const params& p, std::uint64_t n) {
  return blocks::bucket_layout_of(n, p.bucket, scales_per_bucket(p), code_bits(p));
}

//! The input of the fused encode: value i is g[i] (f32, f16 or bf16 bits) times `factor`.
struct scaled_gradient {
  const void* g;
  dtype type;
  float factor;
  GRADCODEC_HD float operator()(std::uint64_t i) const {
    float x;
    if (type == dtype::f32)
      x = static_cast<const float*>(g)[i];
    else if (type == dtype::f16)
      x = blocks::f16_to_f32(static_cast<const std::uint16_t*>(g)[i]);
    else
      x = blocks::bf16_to_f32(static_cast<const std::uint16_t*>(g)[i]);
    return blocks::fmul(x, factor);
  }
};

//! Encodes bucket b into a payload whose bytes start zeroed; returns whether the bucket
//! held a NaN or Inf (the caller sets the header's nonfinite flag).
template <class Input>
GRADCODEC_HD bool encode_bucket(const params& p, const blocks::counter_rng& rng, std::uint64_t n,
                                Input in, std::uint64_t b, std::uint8_t* payload) {
  const blocks::bucket_layout l = layout_of(p, n);
  const std::uint64_t begin = b * p.bucket;
  const std::uint64_t len = n - begin < p.bucket ? n - begin : p.bucket;
  const std::uint32_t per = scales_per_bucket(p), bits = code_bits(p);
  auto v = [&](std::uint64_t j) { return in(begin + j); };
  auto uniform = [&](std::uint64_t j) {
    return blocks::uniform01(rng.at(blocks::rng_stream::rounding, begin + j));
  };
  blocks::bucket_scan m;
  for (std::uint64_t j = 0; j < len; ++j) m.add(v(j));

  float scales[2] = {blocks::canonical_nan(), blocks::canonical_nan()};
  std::uint8_t* codes = payload + l.codes_offset;
  auto put = [&](std::uint64_t j, std::uint32_t code) {
    if (code != 0) blocks::put_code(codes, begin + j, bits, code);
  };
  switch (p.codec) {
    case codec_id::qsgd: {
      scales[0] = blocks::qsgd_norm(len, v, m, p.max_norm);
      const auto q = blocks::qsgd_quantizer::of(scales[0], p.levels);
      for (std::uint64_t j = 0; j < len; ++j) put(j, q.code(v(j), p.stochastic, uniform(j)));
      break;
    }
    case codec_id::terngrad: {
      const float bound = m.finite ? blocks::terngrad_clip_bound(len, v, m.max_abs, p.clip) : 0.0f;
      scales[0] = blocks::terngrad_quantizer::of(m, bound).scale;
      // The codes from the stored scale alone, as a two-kernel encode does.
      const auto q = blocks::terngrad_quantizer::from_scale(scales[0]);
      for (std::uint64_t j = 0; j < len; ++j) put(j, q.code(v(j), uniform(j)));
      break;
    }
    case codec_id::minmax: {
      if (m.finite) {
        blocks::minmax_range r;
        for (std::uint64_t j = 0; j < len; ++j) r.add(v(j));
        scales[0] = r.lo;
        scales[1] = r.hi;
      }
      const auto q = blocks::minmax_quantizer::of(scales[0], scales[1], p.bits);
      for (std::uint64_t j = 0; j < len; ++j) put(j, q.code(v(j), p.stochastic, uniform(j)));
      break;
    }
    case codec_id::sign:
    case codec_id::onebit: {
      if (m.finite) {  // else NaN scales
        if (p.codec == codec_id::sign)
          scales[0] = blocks::sign_scale(p.scale, len, v, m.max_abs);
        else
          blocks::onebit_means(len, v, m.max_abs, scales);
      }
      for (std::uint64_t j = 0; j < len; ++j) put(j, blocks::sign_code(scales[0], v(j)));
      break;
    }
    default: break;
  }
  for (std::uint32_t k = 0; k < per; ++k) {
    const std::uint32_t bits_of = blocks::float_bits(scales[k]);
    std::uint8_t* at = payload + l.scales_offset + (b * per + k) * 4;
    for (int byte = 0; byte < 4; ++byte)
      at[byte] = static_cast<std::uint8_t>(bits_of >> (8 * byte));
  }
  return !m.finite;
}

//! acc[i] = alpha * decoded[i] + acc[i] (one rounding) over bucket b, NaN canonical.
GRADCODEC_HD void decode_accumulate_bucket(const params& p, std::uint64_t n,
                                           const std::uint8_t* payload, std::uint64_t b,
                                           float alpha, float* acc) {
  const blocks::bucket_layout l = layout_of(p, n);
  const std::uint64_t begin = b * p.bucket;
  const std::uint64_t len = n - begin < p.bucket ? n - begin : p.bucket;
  const std::uint32_t per = scales_per_bucket(p), bits = code_bits(p);
  float scales[2] = {0.0f, 0.0f};
  for (std::uint32_t k = 0; k < per; ++k) {
    const std::uint8_t* at = payload + l.scales_offset + (b * per + k) * 4;
    std::uint32_t u = 0;
    for (int byte = 0; byte < 4; ++byte) u |= static_cast<std::uint32_t>(at[byte]) << (8 * byte);
    scales[k] = blocks::bits_float(u);
  }
  const auto qd = blocks::qsgd_dequantizer::of(scales[0], p.levels);
  const auto md = blocks::minmax_dequantizer::of(scales[0], scales[1], p.bits);
  for (std::uint64_t j = 0; j < len; ++j) {
    const std::uint32_t code = blocks::get_code(payload + l.codes_offset, begin + j, bits);
    float x = 0.0f;
    switch (p.codec) {
      case codec_id::qsgd: x = qd.value(code); break;
      case codec_id::terngrad: x = blocks::terngrad_value(scales[0], code); break;
      case codec_id::minmax: x = md.value(code); break;
      case codec_id::sign: x = blocks::sign_value(scales[0], code); break;
      case codec_id::onebit: x = blocks::onebit_value(scales, code); break;
      default: break;
    }
    acc[begin + j] = blocks::canonicalize_nan(blocks::ffma(alpha, x, acc[begin + j]));
  }
}

}  // namespace gradcodec::test::fused
