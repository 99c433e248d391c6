// SPDX-License-Identifier: Apache-2.0
//! @file
//! Error bounds per codec (docs/codecs.md, "Error bounds and error feedback", derives each).
#include "gradcodec/bounds.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "gradcodec/blocks/block_scaled.hpp"

namespace gradcodec {
namespace {

constexpr double inf = std::numeric_limits<double>::infinity();

//! Elements per scale group: the bucket, or n when the tensor is smaller.
double group_of(const codec_spec& s, std::uint64_t n) {
  return static_cast<double>(n == 0 ? s.bucket : std::min<std::uint64_t>(s.bucket, n));
}

//! Fills feedback_safe and residual_gain from the numeric bounds.
codec_bounds finish(codec_bounds b) {
  const double rho = b.variance < 1 ? std::sqrt(b.variance) : inf;
  const double l2_gain = rho < 1 ? rho / (1 - rho) : inf;
  const double max_gain = b.max_relative < 1 ? b.max_relative / (1 - b.max_relative) : inf;
  b.residual_gain = std::min(l2_gain, max_gain);
  b.feedback_safe = b.residual_gain < inf;
  return b;
}

//! Sparsifiers that keep a subset of the values unchanged: ‖x̂ − x‖² = ‖x‖² − kept energy.
codec_bounds subset(double variance, std::string_view reason) {
  codec_bounds b;
  b.variance = variance;
  b.max_relative = 1;  // an unsent element may be as large as the largest
  b.reason = reason;
  return finish(b);
}

codec_bounds quantizer(bool unbiased, double variance, double max_relative,
                       std::string_view reason) {
  codec_bounds b;
  b.unbiased = unbiased;
  b.variance = variance;
  b.max_relative = max_relative;
  b.reason = reason;
  return finish(b);
}

//! Block-scaled codecs (docs/codecs.md, "Error bounds"): per element of a block with
//! largest |w| = A, |error| <= kappa |w| + alpha A, kappa the relative rounding of the
//! element's binade (or the saturation at the top), alpha A the rounding of the element
//! format's subnormals. Over a block of B elements that gives the l2 bound
//! (kappa + alpha sqrt(B))^2, and the infinity norm at most the top binade's step (or the
//! saturation). A rotation of one piece (B a power of two up to 256) keeps the l2 bound
//! (H / sqrt(m) is orthogonal) and multiplies the infinity bound by up to m.
codec_bounds block_scaled_bounds(const codec_spec& s, std::uint64_t n) {
  const blocks::minifloat f = blocks::minifloat_of(s.fmt);
  const bool stochastic = s.rounding == rounding_mode::stochastic;
  const double step = stochastic ? 1.0 : 0.5;  // of a quantum
  const double largest = blocks::max_element(f);
  const double top = f.integer ? 1.0 : std::ldexp(1.0, f.emax);  // smallest |r| of the top binade
  const double min_quantum = f.integer ? 1.0 / 64 : std::ldexp(1.0, f.emin() - int(f.mantissa));
  double kappa = f.integer ? 0.0 : step * std::ldexp(1.0, -int(f.mantissa));
  double alpha = step * min_quantum / top;  // the block max's |r| is at least `top`
  double sat = 0,
         top_step = step * (f.integer ? 1.0 / 64 : std::ldexp(1.0, f.emax - int(f.mantissa))) / top;
  if (s.id == codec_id::fp8row) {
    // r = w / (A / largest): the block max maps to `largest` (to f32 rounding).
    alpha = step * min_quantum / largest;
    top_step = step * std::ldexp(1.0, f.emax - int(f.mantissa)) / largest;
    sat = 0x1p-20;
  } else if (s.id == codec_id::nvfp4) {
    // The E4M3 block scale is within 1/16 of A / 6 / g, so the block max maps to
    // 6 (1 +- 1/16): 1/16 of it may saturate, and a step of the top binade is 1/(6 * 15/16).
    const double lo = 6.0 * 15 / 16;
    alpha = step * min_quantum / lo;
    top_step = step * 2 / lo;
    sat = 1.0 / 16;
  } else {
    sat = (2 * top - largest) / largest;  // OCP's floor rule: up to 2 top maps into `largest`
  }
  kappa = std::max(kappa, sat);
  const double B = group_of(s, n);
  const double l2 = kappa + alpha * std::sqrt(B);
  double max_rel = std::max(top_step, sat);
  double variance = l2 * l2;
  if (s.rotate) {
    const double piece = blocks::rotation_piece(static_cast<std::uint64_t>(B));
    max_rel *= piece;
    if (piece != B) variance = inf;  // several pieces share one scale: no bound derived
  }
  codec_bounds b = quantizer(false, variance, max_rel,
                             s.rotate ? "rotated: the l2 bound of the block's element rounding; "
                                        "an element may take a piece's whole error"
                                      : "each element within its binade's step (or the "
                                        "saturation) of the block maximum");
  b.max_absolute = 0x1p-100;  // scales clamped at 2^-127, subnormal decodes
  return b;
}

}  // namespace

codec_bounds bounds(const codec_spec& s, std::uint64_t n) noexcept {
  const double nd = static_cast<double>(n);
  switch (s.id) {
    case codec_id::topk: {
      // The k largest magnitudes hold at least k/n of the energy.
      const double share =
          n == 0 ? (s.k > 0 ? 0.0 : s.ratio) : static_cast<double>(sparse_count(s, n)) / nd;
      codec_bounds b = subset(1 - share, "contraction: the k largest keep >= k/n of ||x||^2");
      b.feedback_safe = true;  // 1 - k/n < 1 for every n, also in the limit k fixed, n large
      return b;
    }
    case codec_id::dgc: {
      // Equal to top-k unless the sampled threshold falls back (docs/codecs.md, dgc); the
      // fallback still sends every element >= t_3, so the largest always: >= 1/n.
      codec_bounds b = subset(n == 0 ? 1.0 : 1 - 1 / nd,
                              "contraction: as top-k (k/n of ||x||^2) unless the sampled "
                              "threshold falls back; the largest element is always sent");
      b.feedback_safe = true;
      return b;
    }
    case codec_id::randomk: {
      // One element per stratum of m <= ceil(n/k) elements, each with probability 1/m.
      const double m = n == 0 ? (s.k > 0 ? inf : std::ceil(1 / s.ratio))
                              : std::ceil(nd / static_cast<double>(sparse_count(s, n)));
      if (s.unbiased) {
        codec_bounds b = quantizer(true, m - 1, std::max(1.0, m - 1),
                                   "unbiased: variance m-1 for strata of m elements; error "
                                   "feedback has gain >= 1 once m >= 2");
        return b;
      }
      codec_bounds b = subset(1 - 1 / m,
                              "contraction in expectation: each stratum of m "
                              "elements keeps one, so E keeps >= 1/m of ||x||^2");
      b.feedback_safe = true;
      return b;
    }
    case codec_id::threshold: {
      codec_bounds b;
      b.variance = 1;  // nothing may pass
      b.max_relative = s.cap > 0 ? 1.0 : 0.0;
      b.max_absolute = s.cap > 0 ? 0.0 : static_cast<double>(s.tau);
      // Without a cap every unsent |x| < tau: the residual stays below tau. With one, the
      // elements over tau beyond the cap are a top-cap selection: ||e||^2 <=
      // max(n tau^2, (1 - cap/n) ||p||^2), bounded too.
      b.residual_gain = 0;
      if (s.cap > 0) {
        const double rho =
            n == 0 ? 1.0 : std::sqrt(1 - static_cast<double>(std::min(s.cap, n)) / nd);
        b.residual_gain = rho < 1 ? rho / (1 - rho) : inf;
      }
      b.feedback_safe = true;
      b.reason = s.cap > 0 ? "bounded: unsent elements are below tau or outside the top cap"
                           : "absolute: every unsent |x| is below tau";
      return b;
    }
    case codec_id::qsgd: {
      // Step d = norm/s per bucket of B elements; stochastic rounding errs by < d with
      // variance <= min(d^2/4, d|x_i|) per element, nearest by <= d/2.
      const double B = group_of(s, n), lv = s.levels;
      const bool stochastic = s.rounding == rounding_mode::stochastic;
      const double step_rel = s.norm == norm_kind::max ? 1 / lv : std::sqrt(B) / lv;
      const double variance =
          stochastic ? std::min(B / (4 * lv * lv), std::sqrt(B) / lv) : B / (4 * lv * lv);
      return quantizer(stochastic, variance, stochastic ? step_rel : step_rel / 2,
                       s.norm == norm_kind::max
                           ? "max norm: every error is below one step, 1/levels of max|x|"
                           : "l2 norm: a step is ||x||2/levels, up to sqrt(bucket)/levels of "
                             "max|x|; a contraction only when levels > sqrt(bucket)/2");
    }
    case codec_id::terngrad: {
      const double B = group_of(s, n);
      if (s.clip > 0) {
        codec_bounds b =
            quantizer(false, inf, inf, "clipped: a clipped element loses any amount; no bound");
        return b;
      }
      // QSGD with one level and the max norm: errors below max|x|, variance <=
      // min(B/4, sqrt(B)).
      return quantizer(true, std::min(B / 4, std::sqrt(B)), 1.0,
                       "unbiased, one level: an error may reach max|x| (gain 1) and the "
                       "variance min(bucket/4, sqrt(bucket)) exceeds 1 from 4 elements");
    }
    case codec_id::minmax: {
      // Step d = (max - min)/(2^b - 1) <= 2 max|x|/(2^b - 1).
      const double B = group_of(s, n), levels = std::ldexp(1.0, static_cast<int>(s.bits)) - 1;
      const bool stochastic = s.rounding == rounding_mode::stochastic;
      return quantizer(stochastic, B / (levels * levels), (stochastic ? 2 : 1) / levels,
                       stochastic ? "every error is below one step, 2/(2^bits - 1) of max|x|"
                                  : "every error is at most half a step, 1/(2^bits - 1) of "
                                    "max|x|");
    }
    case codec_id::onebit:
    case codec_id::sign: {
      const double B = group_of(s, n);
      if (s.id == codec_id::sign && s.scale == scale_kind::none) {
        return quantizer(false, inf, inf,
                         "unscaled sign sends +-1 whatever the magnitude: no relative bound");
      }
      if (s.id == codec_id::sign && s.scale == scale_kind::l2) {
        // ||x - s sign x||^2 = 2||x||^2 (1 - ||x||1 / (sqrt(B) ||x||2)); per element
        // |x_i - s| < max|x|, at most sqrt(1 - 1/B) of it.
        return quantizer(false, 2 * (1 - 1 / std::sqrt(B)), std::sqrt(1 - 1 / B),
                         "max-norm contraction sqrt(1 - 1/bucket); the l2 error may exceed "
                         "||x||");
      }
      // Two means (onebit) or mean |x| (sign) per bucket: the kept energy is >= ||x||^2/B,
      // and no element errs by more than (1 - 1/B) max|x|.
      return quantizer(false, 1 - 1 / B, 1 - 1 / B,
                       "contraction 1/bucket: the residual may grow to bucket - 1 times the "
                       "gradient");
    }
    case codec_id::fp16:
    case codec_id::bf16: {
      // Round to nearest even: relative error 2^-11 (fp16, 11 significant bits) or 2^-8
      // (bf16, 8) of each value, plus half the smallest subnormal spacing; fp16 overflows
      // past 65504 to Inf.
      codec_bounds b;
      b.unbiased = false;
      b.variance = 1;  // values below the smallest subnormal round to zero
      b.max_relative = s.id == codec_id::fp16 ? std::ldexp(1.0, -11) : std::ldexp(1.0, -8);
      b.max_absolute = s.id == codec_id::fp16 ? std::ldexp(1.0, -25) : std::ldexp(1.0, -134);
      b.reason = s.id == codec_id::fp16
                     ? "relative rounding 2^-11 plus 2^-25 absolute (|x| < 65520; larger "
                       "values become Inf)"
                     : "relative rounding 2^-8 plus 2^-134 absolute";
      return finish(b);
    }
    GRADCODEC_CASE_BLOCK_SCALED:
      return block_scaled_bounds(s, n);
    case codec_id::powersgd: {
      // P P^T M with orthonormal P: an orthogonal projection, never larger than M, but no
      // share of ||M||^2 is guaranteed when P misses M's column space.
      codec_bounds b;
      b.variance = 1;
      b.max_relative = inf;
      b.residual_gain = inf;
      b.feedback_safe = true;
      b.reason =
          "a projection (never expands, no contraction guaranteed); the method is "
          "defined with error feedback, which its warm-started power iteration needs "
          "(Vogels et al. 2019)";
      return b;
    }
  }
  return {};
}

}  // namespace gradcodec
