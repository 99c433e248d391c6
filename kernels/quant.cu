// SPDX-License-Identifier: Apache-2.0
//! @file
//! The quantizers on the GPU: qsgd, terngrad and minmax (docs/codecs.md), one bucketed
//! family over bucket.cuh's kernels.
#include "bucket.cuh"
#include "codecs.hpp"

namespace gradcodec::cuda {
namespace {

using bucket::frame_shape;

struct quant_family {
  static std::uint32_t per(codec_id id) { return id == codec_id::minmax ? 2u : 1u; }
  static std::uint32_t bits(const frame_shape& f) {
    switch (f.codec) {
      case codec_id::qsgd: return blocks::qsgd_code_bits(f.levels);
      case codec_id::terngrad: return blocks::terngrad_code_bits;
      default: return f.minmax_bits;
    }
  }

  template <class V, class Reducer>
  __device__ static void scales(const frame_shape& f, std::uint64_t len, const V& v,
                                const blocks::bucket_scan& m, const Reducer& red, float* s) {
    switch (f.codec) {
      case codec_id::qsgd: s[0] = blocks::qsgd_norm(len, v, m, f.max_norm, red); break;
      case codec_id::terngrad:
        s[0] = blocks::terngrad_quantizer::of(
                   m, blocks::terngrad_clip_bound(len, v, m.max_abs, f.clip, red))
                   .scale;
        break;
      default: {
        const blocks::minmax_range r = red.range(len, v);
        s[0] = r.lo;
        s[1] = r.hi;
      }
    }
  }

  //! The code of an element of a bucket, from the bucket's stored scales.
  struct coder {
    blocks::qsgd_quantizer q;
    blocks::terngrad_quantizer t;
    blocks::minmax_quantizer mm;

    __device__ static coder of(const frame_shape& f, const float* s) {
      coder c{};
      switch (f.codec) {
        case codec_id::qsgd: c.q = blocks::qsgd_quantizer::of(s[0], f.levels); break;
        case codec_id::terngrad: c.t = blocks::terngrad_quantizer::from_scale(s[0]); break;
        default: c.mm = blocks::minmax_quantizer::of(s[0], s[1], f.minmax_bits);
      }
      return c;
    }
    //! Stochastic rounding, and TernGrad always, draw a rounding number.
    __device__ static bool random(const frame_shape& f) {
      return f.codec == codec_id::terngrad || f.stochastic;
    }
    __device__ std::uint32_t code(const frame_shape& f, float v, float u) const {
      switch (f.codec) {
        case codec_id::qsgd: return q.code(v, f.stochastic, u);
        case codec_id::terngrad: return t.code(v, u);
        default: return mm.code(v, f.stochastic, u);
      }
    }
  };

  //! The decoded value of an element of a bucket, from the bucket's stored scales.
  struct decoder {
    blocks::qsgd_dequantizer q;
    blocks::minmax_dequantizer mm;
    float scale0;

    __device__ static decoder of(const frame_shape& f, const float* s) {
      decoder d{};
      d.scale0 = s[0];
      if (f.codec == codec_id::qsgd) d.q = blocks::qsgd_dequantizer::of(s[0], f.levels);
      if (f.codec == codec_id::minmax)
        d.mm = blocks::minmax_dequantizer::of(s[0], s[1], f.minmax_bits);
      return d;
    }
    __device__ float value(const frame_shape& f, std::uint32_t code) const {
      switch (f.codec) {
        case codec_id::qsgd: return q.value(code);
        case codec_id::terngrad: return blocks::terngrad_value(scale0, code);
        default: return mm.value(code);
      }
    }
  };

  static void fill_header(const codec_spec& s, frame_header& h) {
    switch (s.id) {
      case codec_id::qsgd:
        h.level = static_cast<std::uint16_t>(s.levels);
        h.mode = static_cast<std::uint8_t>(
            (s.rounding == rounding_mode::stochastic ? mode_stochastic : 0) |
            (s.norm == norm_kind::max ? mode_norm_max : 0));
        break;
      case codec_id::terngrad: h.param = s.clip; break;
      default:
        h.level = static_cast<std::uint16_t>(s.bits);
        h.mode = s.rounding == rounding_mode::stochastic ? mode_stochastic : 0;
    }
  }
};

}  // namespace

GRADCODEC_CUDA_BUCKET_FAMILY(quant, quant_family)

}  // namespace gradcodec::cuda
