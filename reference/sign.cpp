// SPDX-License-Identifier: Apache-2.0
//! @file
//! Reference sign codec (docs/codecs.md "sign"): signSGD (scale 1), EF-signSGD (scale
//! mean |v|, Karimireddy et al. 2019) or DeepSpeed's ||v||2 / sqrt(len) per bucket, plus
//! one sign bit per element.
#include "sign_common.hpp"

namespace gradcodec::reference {

std::size_t sign_workspace(const codec_spec&, const_tensor_view, operation) { return 0; }

status sign_encode(const detail::encode_call& c) {
  const scale_kind kind = c.spec.scale;
  const auto scales_of = [&](bucketed::span s, prescale p, float* scale) {
    const auto v = [&](std::uint64_t i) { return load(c.in, s.begin + i); };
    switch (kind) {
      case scale_kind::none: *scale = 1.0f; break;
      case scale_kind::mean: {
        const float sum =
            canonical_sum(s.len, [&](std::uint64_t i) { return std::fabs(v(i)) * p.down; });
        *scale = (sum / static_cast<float>(s.len)) * p.up;
        break;
      }
      case scale_kind::l2: {
        const float sum = canonical_sum(s.len, [&](std::uint64_t i) {
          const float t = v(i) * p.down;
          return t * t;
        });
        *scale = std::sqrt(sum / static_cast<float>(s.len)) * p.up;
        break;
      }
    }
  };
  if (auto st = sign_frame::encode<1>(c, scales_of); !st.ok()) return st;
  c.hdr.mode = static_cast<std::uint8_t>(static_cast<unsigned>(kind) << mode_scale_shift);
  return {};
}

status sign_decode(const detail::decode_call& c) {
  return sign_frame::decode<1>(c, [](const float* scale, std::uint32_t bit) {
    // A NaN scale (non-finite bucket) decodes as itself, whatever the bit.
    if (std::isnan(*scale)) return *scale;
    return bit != 0 ? -*scale : *scale;
  });
}

}  // namespace gradcodec::reference
