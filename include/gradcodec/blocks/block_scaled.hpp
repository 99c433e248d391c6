// SPDX-License-Identifier: Apache-2.0
//! @file
//! The block rules of the block-scaled codecs mxfp8, mxfp6, mxfp4, mxint8 (OCP MX v1.0:
//! an E8M0 power-of-two scale per block), nvfp4 (an E4M3 scale per 16 elements and an f32
//! scale per tensor) and fp8row (an f32 scale per row), and their optional randomized
//! Hadamard rotation (docs/codecs.md "Block-scaled codecs"). Host and device: every
//! backend and a fused kernel outside the library compute the same codes with these.
//! The per-block scale steps are forced inline (GRADCODEC_HD_INLINE): a SIMD backend calls
//! them once per block, and an out-of-line copy compiled for the baseline ISA then costs a
//! vector-state transition per call.
#pragma once

#include <cstdint>

#include "gradcodec/blocks/codec_traits.hpp"
#include "gradcodec/blocks/config.hpp"
#include "gradcodec/blocks/fmath.hpp"
#include "gradcodec/blocks/layout.hpp"
#include "gradcodec/blocks/minifloat.hpp"
#include "gradcodec/blocks/philox.hpp"
#include "gradcodec/format.hpp"

namespace gradcodec::blocks {

enum class block_scale : std::uint8_t {
  e8m0 = 0,  //!< mx*: 2^(code - 127), code 255 NaN
  e4m3 = 1,  //!< nvfp4: an E4M3 value times the tensor's f32 scale
  f32 = 2,   //!< fp8row: an f32
};

//! Everything a block-scaled frame's header fixes: element format, scale kind, rotation.
struct block_rule {
  minifloat element;
  block_scale scale;
  std::uint32_t scale_bytes;  //!< per block
  bool tensor_scale;          //!< nvfp4: one f32 for the whole tensor
  bool stochastic;
  bool rotate;
};

GRADCODEC_HD constexpr bool block_scaled(codec_id c) { return traits_of(c).block_scaled; }

GRADCODEC_HD constexpr block_rule block_rule_of(codec_id c, element_format f, std::uint8_t mode) {
  const block_scale s = c == codec_id::nvfp4    ? block_scale::e4m3
                        : c == codec_id::fp8row ? block_scale::f32
                                                : block_scale::e8m0;
  return {minifloat_of(f),
          s,
          s == block_scale::f32 ? 4u : 1u,
          c == codec_id::nvfp4,
          (mode & mode_stochastic) != 0,
          (mode & mode_rotate) != 0};
}

//! Where a frame's key, scales and codes lie (group: elements per block or row).
GRADCODEC_HD constexpr block_scaled_layout layout_of(const block_rule& r, std::uint64_t n,
                                                     std::uint64_t group) {
  return block_scaled_layout_of(n, group, r.scale_bytes, r.tensor_scale, r.element.bits, r.rotate);
}

//! The element formats each codec accepts (the header's level).
GRADCODEC_HD constexpr bool element_allowed(codec_id c, element_format f) {
  switch (c) {
    case codec_id::mxfp8:
    case codec_id::fp8row: return f == element_format::e4m3 || f == element_format::e5m2;
    case codec_id::mxfp6: return f == element_format::e3m2 || f == element_format::e2m3;
    case codec_id::mxfp4:
    case codec_id::nvfp4: return f == element_format::e2m1;
    case codec_id::mxint8: return f == element_format::int8;
    default: return false;
  }
}

//! The largest finite element value (e4m3 448, e5m2 57344, ..., int8 127/64).
GRADCODEC_HD_INLINE float max_element(const minifloat& f) { return element_value(f, f.max_code); }

//! E8M0 scale code of a block whose largest |v| is amax (finite): the OCP rule
//! 2^(floor(log2 amax) - emax) as code floor(log2 amax) - emax + 127 clamped to [0, 254];
//! amax = 0 (and subnormal amax) give the smallest, 0.
GRADCODEC_HD_INLINE std::uint32_t e8m0_code(float amax, const minifloat& f) {
  const int e = exponent_of(amax);  // -127 for 0 and subnormals
  const int code = e - f.emax + 127;
  return static_cast<std::uint32_t>(code < 0 ? 0 : (code > 254 ? 254 : code));
}
inline constexpr std::uint32_t e8m0_nan = 0xFFu;
//! The scale of an nvfp4 tensor whose largest finite |v| is amax: amax / (6 * 448).
GRADCODEC_HD_INLINE float nvfp4_tensor_scale(float amax) { return fdiv(amax, 2688.0f); }
inline constexpr std::uint32_t e4m3_nan = 0x7Fu;

//! The largest encode multiplier: its reciprocal 2^-126 is still a normal f32.
inline constexpr float max_multiplier = 0x1p126f;
//! a / b rounded, at most max_multiplier (an infinite quotient of a zero b included).
GRADCODEC_HD_INLINE float capped_quotient(float a, float b) {
  const float q = fdiv(a, b);
  return q < max_multiplier ? q : max_multiplier;
}

//! How one block's values become element inputs r and codes become values. Encode:
//! r = v * enc (a multiply: a division would bound the encode's speed); every code is 0
//! when `zero`. Decode: x = element_value(code) * dec.
struct block_quantizer {
  bool zero = false;
  float enc = 0.0f, dec = 0.0f;

  //! e8m0 from its code.
  GRADCODEC_HD_INLINE static block_quantizer e8m0(std::uint32_t code) {
    block_quantizer q;
    if (code == e8m0_nan) {
      q.zero = true;
      q.dec = canonical_nan();
      return q;
    }
    q.enc = pow2f(127 - static_cast<int>(code));
    q.dec = pow2f(static_cast<int>(code) - 127);
    return q;
  }
  //! nvfp4 from the block's decode multiplier d (its E4M3 value times the tensor scale):
  //! enc = 1 / d, capped; a zero or non-finite d sends zeros.
  GRADCODEC_HD_INLINE static block_quantizer decode_multiplier(float d) {
    block_quantizer q;
    q.zero = !(d > 0.0f) || !is_finite(d);
    q.enc = q.zero ? 0.0f : capped_quotient(1.0f, d);
    q.dec = d;
    return q;
  }
  //! fp8row from the row's stored encode multiplier t: dec = 1 / t; a non-finite t (a
  //! non-finite row's NaN, which then decodes to NaN) sends zeros.
  GRADCODEC_HD_INLINE static block_quantizer encode_multiplier(float t) {
    block_quantizer q;
    q.zero = !(t > 0.0f) || !is_finite(t);
    q.enc = t;
    q.dec = fdiv(1.0f, t);
    return q;
  }
  GRADCODEC_HD_INLINE std::uint32_t code(const minifloat& f, float v, bool stochastic,
                                         float u) const {
    if (zero) return 0;
    return element_code(f, fmul(v, enc), stochastic, u);
  }
};

//! The E4M3 scale code of an nvfp4 block whose largest |v| (after rotation) is amax, given
//! the tensor scale g: s = e4m3(amax / 6 / g) (nearest even, saturating); its decode
//! multiplier is then fmul(value(s), g).
GRADCODEC_HD_INLINE std::uint32_t nvfp4_block_code(float amax, float g) {
  if (!(g > 0.0f)) return 0;
  return element_code(minifloat_of(element_format::e4m3), fdiv(fdiv(amax, 6.0f), g), false, 0.0f);
}
GRADCODEC_HD_INLINE float nvfp4_decode_multiplier(std::uint32_t block_code, float g) {
  return fmul(element_value(minifloat_of(element_format::e4m3), block_code), g);
}
//! The f32 scale of an fp8row row whose largest |v| is amax, its encode multiplier:
//! max_element / amax (torchft's row scale), capped (an all-zero row's included).
GRADCODEC_HD_INLINE float row_scale(float amax, const minifloat& f) {
  return capped_quotient(max_element(f), amax);
}

// ---- Rotation -------------------------------------------------------------------------

//! The largest rotated piece.
inline constexpr std::uint32_t max_rotation_piece = 256;

//! The length of the piece that starts `remaining` elements before its block's end: the
//! largest power of two <= min(remaining, 256).
GRADCODEC_HD std::uint32_t rotation_piece(std::uint64_t remaining) {
  std::uint32_t m = max_rotation_piece;
  while (m > remaining) m >>= 1;
  return m;
}

//! Whether element i (global index) is negated: bit i % 32 of rotation number i / 32.
GRADCODEC_HD bool rotation_flip(const counter_rng& rng, std::uint64_t i) {
  return ((rng.at(rng_stream::rotation, i >> 5) >> (i & 31u)) & 1u) != 0;
}
GRADCODEC_HD float negate_if(float x, bool flip) {
  return flip ? bits_float(float_bits(x) ^ 0x80000000u) : x;
}

//! The Walsh-Hadamard transform of w[0..m) in place (m a power of two, unnormalized):
//! for h = 1, 2, 4, ... < m, each pair (w[j], w[j + h]) with j % 2h < h becomes
//! (w[j] + w[j + h], w[j] - w[j + h]).
GRADCODEC_HD void hadamard(float* w, std::uint32_t m) {
  for (std::uint32_t h = 1; h < m; h <<= 1)
    for (std::uint32_t i = 0; i < m; i += 2 * h)
      for (std::uint32_t j = i; j < i + h; ++j) {
        const float a = w[j], b = w[j + h];
        w[j] = fadd(a, b);
        w[j + h] = fsub(a, b);
      }
}

//! The rotation stream's flips of the piece that starts at global index `first`: whether
//! its element j is negated.
struct rotation_flips {
  const counter_rng& rng;
  std::uint64_t first;
  GRADCODEC_HD bool operator()(std::uint32_t j) const { return rotation_flip(rng, first + j); }
};

//! Encode side of one piece: w = H (D v / m), flip(j) telling whether element j is negated
//! (D). The 1/m (a power of two) keeps every |w| <= max |v|.
template <class Flip>
GRADCODEC_HD void rotate_piece(float* w, std::uint32_t m, const Flip& flip) {
  int lg = 0;
  while ((1u << lg) < m) ++lg;
  const float inv = pow2f(-lg);
  for (std::uint32_t j = 0; j < m; ++j) w[j] = fmul(negate_if(w[j], flip(j)), inv);
  hadamard(w, m);
}
//! Decode side: v = D H w (H H = m I).
template <class Flip>
GRADCODEC_HD void unrotate_piece(float* w, std::uint32_t m, const Flip& flip) {
  hadamard(w, m);
  for (std::uint32_t j = 0; j < m; ++j) w[j] = negate_if(w[j], flip(j));
}
//! The piece whose first element has global index `first`, with the rotation stream's flips.
GRADCODEC_HD void rotate_piece(float* w, std::uint32_t m, std::uint64_t first,
                               const counter_rng& rng) {
  rotate_piece(w, m, rotation_flips{rng, first});
}
GRADCODEC_HD void unrotate_piece(float* w, std::uint32_t m, std::uint64_t first,
                                 const counter_rng& rng) {
  unrotate_piece(w, m, rotation_flips{rng, first});
}

// ---- One block ------------------------------------------------------------------------
// A block is elements [begin, begin + len) of the tensor; load(i) reads input i (global
// index) as f32. Backends run these per block (a thread, a task), so all agree.

//! Calls fn(i, w) for every value the block quantizes, in order: the inputs, or their
//! rotation piece by piece (a 256-float buffer on the stack).
template <class Load, class Fn>
GRADCODEC_HD void for_each_block_value(const block_rule& r, const counter_rng& rng,
                                       std::uint64_t begin, std::uint64_t len, Load&& load,
                                       Fn&& fn) {
  if (!r.rotate) {
    for (std::uint64_t j = 0; j < len; ++j) fn(begin + j, load(begin + j));
    return;
  }
  float w[max_rotation_piece];
  for (std::uint64_t off = 0; off < len;) {
    const std::uint32_t m = rotation_piece(len - off);
    for (std::uint32_t j = 0; j < m; ++j) w[j] = load(begin + off + j);
    rotate_piece(w, m, begin + off, rng);
    for (std::uint32_t j = 0; j < m; ++j) fn(begin + off + j, w[j]);
    off += m;
  }
}

//! Whether the block's inputs are all finite, and the largest |w| it quantizes.
struct block_scan {
  bool finite = true;
  float amax = 0.0f;
};
//! One pass: the rotation of a piece holding NaN or Inf is not finite either (every output
//! sums every input; finite inputs cannot overflow), so checking w checks the inputs.
template <class Load>
GRADCODEC_HD block_scan scan_block(const block_rule& r, const counter_rng& rng, std::uint64_t begin,
                                   std::uint64_t len, Load&& load) {
  block_scan s;
  for_each_block_value(r, rng, begin, len, load, [&](std::uint64_t, float w) {
    if (!is_finite(w)) s.finite = false;
    const float a = fabs_bits(w);
    if (a > s.amax) s.amax = a;
  });
  return s;
}

//! The stored scale of a block (E8M0 or E4M3 code, or f32 bits), NaN for a non-finite one;
//! g is nvfp4's tensor scale.
GRADCODEC_HD_INLINE std::uint32_t block_scale_bits(const block_rule& r, const block_scan& s,
                                                   float g) {
  switch (r.scale) {
    case block_scale::e8m0: return s.finite ? e8m0_code(s.amax, r.element) : e8m0_nan;
    case block_scale::e4m3: return s.finite ? nvfp4_block_code(s.amax, g) : e4m3_nan;
    case block_scale::f32:
      return s.finite ? float_bits(row_scale(s.amax, r.element)) : canonical_nan_bits;
  }
  return 0;
}
GRADCODEC_HD_INLINE block_quantizer quantizer_of(const block_rule& r, std::uint32_t scale_bits,
                                                 float g) {
  switch (r.scale) {
    case block_scale::e8m0: return block_quantizer::e8m0(scale_bits);
    case block_scale::e4m3:
      return block_quantizer::decode_multiplier(nvfp4_decode_multiplier(scale_bits, g));
    case block_scale::f32: return block_quantizer::encode_multiplier(bits_float(scale_bits));
  }
  return {};
}
GRADCODEC_HD_INLINE void put_block_scale(const block_rule& r, std::uint8_t* scales, std::uint64_t b,
                                         std::uint32_t bits) {
  for (std::uint32_t k = 0; k < r.scale_bytes; ++k)
    scales[b * r.scale_bytes + k] = static_cast<std::uint8_t>(bits >> (8 * k));
}
GRADCODEC_HD_INLINE std::uint32_t get_block_scale(const block_rule& r, const std::uint8_t* scales,
                                                  std::uint64_t b) {
  std::uint32_t bits = 0;
  for (std::uint32_t k = 0; k < r.scale_bytes; ++k)
    bits |= static_cast<std::uint32_t>(scales[b * r.scale_bytes + k]) << (8 * k);
  return bits;
}

//! The code of value w of element i (global index) under a block's quantizer.
GRADCODEC_HD_INLINE std::uint32_t code_at(const block_rule& r, const counter_rng& rng,
                                          const block_quantizer& q, std::uint64_t i, float w) {
  const float u = r.stochastic ? uniform01(rng.at(rng_stream::rounding, i)) : 0.0f;
  return q.code(r.element, w, r.stochastic, u);
}

//! Encodes one block: returns its scan, sets `scale` to its stored scale (g: nvfp4's tensor
//! scale) and calls put(i, code) for every element of a finite block (a non-finite one
//! sends zero codes). A block of up to 256 elements is loaded and rotated once, into a
//! buffer; a longer one is read (and rotated) again for the codes after its scan.
template <class Load, class Put>
GRADCODEC_HD block_scan encode_block(const block_rule& r, const counter_rng& rng, float g,
                                     std::uint64_t begin, std::uint64_t len, Load&& load,
                                     std::uint32_t& scale, Put&& put) {
  block_scan s;
  if (len <= max_rotation_piece) {
    float w[max_rotation_piece];
    for (std::uint32_t j = 0; j < len; ++j) {
      w[j] = load(begin + j);
      if (!is_finite(w[j])) s.finite = false;
    }
    if (s.finite && r.rotate)
      for (std::uint32_t off = 0; off < len;) {
        const std::uint32_t m = rotation_piece(len - off);
        rotate_piece(w + off, m, begin + off, rng);
        off += m;
      }
    if (s.finite)
      for (std::uint32_t j = 0; j < len; ++j)
        if (fabs_bits(w[j]) > s.amax) s.amax = fabs_bits(w[j]);
    scale = block_scale_bits(r, s, g);
    if (!s.finite) return s;
    const block_quantizer q = quantizer_of(r, scale, g);
    for (std::uint32_t j = 0; j < len; ++j) put(begin + j, code_at(r, rng, q, begin + j, w[j]));
    return s;
  }
  s = scan_block(r, rng, begin, len, load);
  scale = block_scale_bits(r, s, g);
  if (!s.finite) return s;
  const block_quantizer q = quantizer_of(r, scale, g);
  for_each_block_value(r, rng, begin, len, load,
                       [&](std::uint64_t i, float w) { put(i, code_at(r, rng, q, i, w)); });
  return s;
}

//! Calls emit(i, x) for every element of a block, x = element(i) * q.dec with element(i)
//! the value of element i's code (element_value; a backend may look it up in a table).
template <class Element, class Emit>
GRADCODEC_HD void decode_block(const block_rule& r, const counter_rng& rng,
                               const block_quantizer& q, std::uint64_t begin, std::uint64_t len,
                               Element&& element, Emit&& emit) {
  if (!r.rotate) {
    for (std::uint64_t j = 0; j < len; ++j) emit(begin + j, fmul(element(begin + j), q.dec));
    return;
  }
  float w[max_rotation_piece];
  for (std::uint64_t off = 0; off < len;) {
    const std::uint32_t m = rotation_piece(len - off);
    for (std::uint32_t j = 0; j < m; ++j) w[j] = fmul(element(begin + off + j), q.dec);
    unrotate_piece(w, m, begin + off, rng);
    for (std::uint32_t j = 0; j < m; ++j) emit(begin + off + j, w[j]);
    off += m;
  }
}

}  // namespace gradcodec::blocks
