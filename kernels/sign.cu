// SPDX-License-Identifier: Apache-2.0
//! @file
//! The sign codecs on the GPU: sign (signSGD and scaled sign) and onebit (1-bit SGD)
//! (docs/codecs.md), one bucketed family over bucket.cuh's kernels: one bit per element,
//! with one scale per bucket (sign) or the means of its two halves (onebit).
#include "bucket.cuh"
#include "codecs.hpp"
#include "gradcodec/blocks/sign.hpp"

namespace gradcodec::cuda {
namespace {

using bucket::frame_shape;

struct sign_family {
  static std::uint32_t per(codec_id id) { return id == codec_id::onebit ? 2u : 1u; }
  static std::uint32_t bits(const frame_shape&) { return 1; }

  template <class V, class Reducer>
  __device__ static void scales(const frame_shape& f, std::uint64_t len, const V& v,
                                const blocks::bucket_scan& m, const Reducer& red, float* s) {
    if (f.codec == codec_id::sign)
      s[0] = blocks::sign_scale(f.scale, len, v, m.max_abs, red);
    else
      blocks::onebit_means(len, v, m.max_abs, s, red);
  }

  //! The sign bit of an element: both codecs code against the bucket's first scale.
  struct coder {
    float scale0;
    __device__ static coder of(const frame_shape&, const float* s) { return {s[0]}; }
    __device__ static bool random(const frame_shape&) { return false; }
    __device__ std::uint32_t code(const frame_shape&, float v, float) const {
      return blocks::sign_code(scale0, v);
    }
  };

  //! The decoded value of an element of a bucket, from the bucket's stored scales.
  struct decoder {
    float s[2];
    __device__ static decoder of(const frame_shape& f, const float* scales) {
      return {{scales[0], f.per > 1 ? scales[1] : 0.0f}};
    }
    __device__ float value(const frame_shape& f, std::uint32_t code) const {
      return f.codec == codec_id::sign ? blocks::sign_value(s[0], code)
                                       : blocks::onebit_value(s, code);
    }
  };

  static void fill_header(const codec_spec& s, frame_header& h) {
    if (s.id == codec_id::sign)
      h.mode = static_cast<std::uint8_t>(static_cast<unsigned>(s.scale) << mode_scale_shift);
  }
};

}  // namespace

GRADCODEC_CUDA_BUCKET_FAMILY(sign, sign_family)

}  // namespace gradcodec::cuda
