// SPDX-License-Identifier: Apache-2.0
//! @file
//! Bucketed quantizers qsgd, terngrad and minmax (docs/codecs.md): encode, decode,
//! decode-accumulate and fused error feedback, bit-identical to reference/{qsgd,terngrad,
//! minmax}.cpp, on the bucket pieces of bucket-inl.hpp. Included inside an ISA namespace
//! after cpu/family-inl.hpp.
//!
//! Shape of every pass. Threads take tasks of whole buckets whose first element is a
//! multiple of 16, so each group of 16 codes (2*Bits whole bytes, elements 16g..16g+15)
//! belongs to one task. Per bucket: one scan (finite? max |v|, or min/max), the reductions
//! of the formula (canonical sums, 16 lanes relative to the bucket start), then one pass over
//! the bucket's groups: full groups are quantized and packed straight away; a group shared
//! with the neighbouring bucket (bucket size not a multiple of 16) is assembled lane by lane
//! in a carry register and packed when its last lane is done. The bucket is still in L1/L2
//! for the second and third pass at the default sizes. Error feedback runs the same pass on
//! p = g + e and writes e = p - decode(code) next to the codes.

#include "bucket-inl.hpp"

// ---- The three codecs: per-bucket parameters and lane-wise formulas ---------------------
// Each kernel K gives: scales per bucket, whether the scan needs lo/hi, the code of an
// all-zero or non-finite bucket, prepare() (scales to store + quantizer parameters),
// quantize<Stochastic>(), decode_params() (from the stored scales) and dequant().

using blocks::qsgd_code_bits;

struct qsgd_kernel {
  static constexpr unsigned scales = 1;
  static constexpr bool range = false;
  std::uint32_t s;
  bool max_norm;
  std::uint32_t zero_code() const { return s; }

  struct enc {
    bool trivial;
    vf16 down, inv;
    vu16 sv;
  };
  struct dec {
    vf16 step, up, fs;
    vu16 top;
  };

  template <class Src>
  enc prepare(const Src& src, std::uint64_t s0, std::uint64_t len, const quant_scan& sc,
              float* scale) const {
    enc q{true, vzero(), vzero(), vset1u(s)};
    if (!sc.finite) {
      scale[0] = quant_nan();
      return q;
    }
    float norm = sc.max_abs;
    if (!max_norm) {
      const quant_prescale p = quant_prescale_for(sc.max_abs);
      const vf16 down = vset1(p.down);
      const float sum =
          quant_canonical_sum(len, [&](std::uint64_t j, unsigned cnt) GRADCODEC_VLAMBDA {
            const vf16 t = quant_load(src, s0 + j, cnt) * down;
            return t * t;
          });
      norm = std::sqrt(sum) * p.up;
      // Saturated as in the reference: FLT_MAX still bounds every |v|.
      if (std::isinf(norm)) norm = std::numeric_limits<float>::max();
    }
    scale[0] = norm;
    if (norm == 0.0f) return q;
    const float down = quant_prescale_for(norm).down;
    q.trivial = false;
    q.down = vset1(down);
    q.inv = vset1(static_cast<float>(s) / (norm * down));
    return q;
  }

  template <bool Stochastic>
  GRADCODEC_VINLINE vu16 quantize(vf16 v, vf16 u, const enc& q) const {
    const vf16 r = (vabs(v) * q.down) * q.inv;
    vu16 l;
    if constexpr (Stochastic) {
      const vf16 f = vfloor(r);
      l = vtrunc_u(f) - vlt_bits(u, r - f);  // - all-ones = + 1
    } else {
      l = vtrunc_u(vfloor(r + vset1(0.5f)));
    }
    l = vminu(l, q.sv);
    // s - l for v < 0 (not -0.0), s + l otherwise: (l ^ neg) - neg negates where neg is all ones.
    const vu16 neg = vlt_bits(v, vzero());
    return q.sv + ((l ^ neg) - neg);
  }

  dec decode_params(const float* scale) const {
    const float norm = scale[0], fs = static_cast<float>(s);
    const quant_prescale p = quant_prescale_for(norm);
    const float nd = norm * p.down;
    float step = nd / fs;
    if (step > 0.0f && step * fs > nd) step = blocks::bits_float(blocks::float_bits(step) - 1u);
    return {vset1(step), vset1(p.up), vset1(fs), vset1u(2u * s)};
  }

  GRADCODEC_VINLINE vf16 dequant(vu16 code, const dec& d) const {
    // float(code) - float(s) is exact: the same value as float(code - s).
    const vf16 q = vto_f(vminu(code, d.top)) - d.fs;
    return (q * d.step) * d.up;
  }
};

struct terngrad_kernel {
  static constexpr unsigned scales = 1;
  static constexpr bool range = false;
  float clip;
  std::uint32_t zero_code() const { return 0; }

  struct enc {
    bool trivial;
    vf16 cb, ncb, down, inv;
  };
  struct dec {
    vf16 s;
  };

  template <class Src>
  enc prepare(const Src& src, std::uint64_t s0, std::uint64_t len, const quant_scan& sc,
              float* scale) const {
    enc q{true, vzero(), vzero(), vzero(), vzero()};
    if (!sc.finite) {
      scale[0] = quant_nan();
      return q;
    }
    float cb = std::numeric_limits<float>::infinity();
    if (clip > 0.0f) {
      const quant_prescale p = quant_prescale_for(sc.max_abs);
      const vf16 down = vset1(p.down);
      const float lenf = static_cast<float>(len);
      const float mean = quant_canonical_sum(len,
                                             [&](std::uint64_t j, unsigned cnt) GRADCODEC_VLAMBDA {
                                               return quant_load(src, s0 + j, cnt) * down;
                                             }) /
                         lenf;
      const vf16 vmean = vset1(mean);
      const float var = quant_canonical_sum(len,
                                            [&](std::uint64_t j, unsigned cnt) GRADCODEC_VLAMBDA {
                                              const vf16 d =
                                                  quant_load(src, s0 + j, cnt) * down - vmean;
                                              return d * d;
                                            }) /
                        lenf;
      cb = clip * (std::sqrt(var) * p.up);
    }
    const float s = std::min(sc.max_abs, cb);
    scale[0] = s;
    if (s == 0.0f) return q;
    const float down = quant_prescale_for(s).down;
    q.trivial = false;
    q.cb = vset1(cb);
    q.ncb = vset1(-cb);
    q.down = vset1(down);
    q.inv = vset1(1.0f / (s * down));
    return q;
  }

  template <bool Stochastic>
  GRADCODEC_VINLINE vu16 quantize(vf16 v, vf16 u, const enc& q) const {
    // w = v < -c ? -c : (v > c ? c : v), with vmax(a, b) = a > b ? a : b and
    // vmin(a, b) = a < b ? a : b on every level.
    const vf16 w = vmin(q.cb, vmax(q.ncb, v));
    const vf16 prob = (vabs(w) * q.down) * q.inv;
    const vu16 nonzero = vlt_bits(u, prob);
    const vu16 neg = vlt_bits(w, vzero());
    return nonzero & (vset1u(1) | (neg & vset1u(2)));  // 01 = +1, 11 = -1
  }

  dec decode_params(const float* scale) const { return {vset1(scale[0])}; }

  GRADCODEC_VINLINE vf16 dequant(vu16 code, const dec& d) const {
    // t * s with t = +1 (01), -1 (11), +0 (00, 10), evaluated as s, -s (sign flip) and 0.0f * s:
    // the same value for every non-NaN s, and the NaN bits the reference gets (its compiler
    // folds 1.0f * s to s and -1.0f * s to -s).
    const vu16 nonzero = vset1u(0) - (code & vset1u(1));  // all ones for 01 and 11
    const vu16 signed_s = vbits(d.s) ^ vshl(code & vset1u(2), 30);
    const vu16 zero_s = vbits(vzero() * d.s);
    return vfrombits(zero_s ^ ((signed_s ^ zero_s) & nonzero));
  }
};

struct minmax_kernel {
  static constexpr unsigned scales = 2;
  static constexpr bool range = true;
  std::uint32_t levels;  // L = 2^b - 1
  std::uint32_t zero_code() const { return 0; }

  struct enc {
    bool trivial;
    vf16 down, lo_d, inv;
    vu16 top;
  };
  struct dec {
    vf16 lo, hi, lo_d, step, up;
  };

  template <class Src>
  enc prepare(const Src&, std::uint64_t, std::uint64_t, const quant_scan& sc, float* scale) const {
    enc q{true, vzero(), vzero(), vzero(), vset1u(levels)};
    if (!sc.finite) {
      scale[0] = scale[1] = quant_nan();
      return q;
    }
    scale[0] = sc.lo;
    scale[1] = sc.hi;
    const quant_prescale p = quant_prescale_for(std::max(std::fabs(sc.lo), std::fabs(sc.hi)));
    const float lo_d = sc.lo * p.down;
    const float h_d = sc.hi * p.down - lo_d;
    if (h_d == 0.0f) return q;
    q.trivial = false;
    q.down = vset1(p.down);
    q.lo_d = vset1(lo_d);
    q.inv = vset1(static_cast<float>(levels) / h_d);
    return q;
  }

  template <bool Stochastic>
  GRADCODEC_VINLINE vu16 quantize(vf16 v, vf16 u, const enc& q) const {
    const vf16 t = (v * q.down - q.lo_d) * q.inv;
    vu16 l;
    if constexpr (Stochastic) {
      const vf16 f = vfloor(t);
      l = vtrunc_u(f) - vlt_bits(u, t - f);
    } else {
      l = vtrunc_u(vfloor(t + vset1(0.5f)));
    }
    return vminu(l, q.top);
  }

  dec decode_params(const float* scale) const {
    const float lo = scale[0], hi = scale[1];
    const quant_prescale p = quant_prescale_for(std::max(std::fabs(lo), std::fabs(hi)));
    const float lo_d = lo * p.down;
    const float step = (hi * p.down - lo_d) / static_cast<float>(levels);
    return {vset1(lo), vset1(hi), vset1(lo_d), vset1(step), vset1(p.up)};
  }

  GRADCODEC_VINLINE vf16 dequant(vu16 code, const dec& d) const {
    const vf16 x = vfma(vto_f(code), d.step, d.lo_d) * d.up;
    // if (x < lo) x = lo; if (x > hi) x = hi; (a NaN x or bound leaves x as it is)
    return vmin(d.hi, vmax(d.lo, x));
  }
};

// ---- Drivers --------------------------------------------------------------------------

//! Stores the codes of group g; the last group may be cut short by the end of the payload
//! (its missing bytes would only hold zero codes past n).
template <unsigned Bits>
inline void quant_store_group(const quant_out& o, std::uint64_t g, vu16 code) {
  std::byte* codes = o.payload + o.l.codes_offset;
  const std::uint64_t room = o.l.total - o.l.codes_offset, at = 2 * Bits * g;
  if (at + 2 * Bits <= room) {
    pack16<Bits>(codes + at, code);
  } else {
    std::byte tmp[16];
    pack16<Bits>(tmp, code);
    std::memcpy(codes + at, tmp, room - at);
  }
}

//! Groups of 16 whose uniforms one philox_uniforms call draws ahead into a buffer on the
//! stack (2 KiB); a multiple of philox_uniform_step. The default bucket of 512 is 32 groups.
inline constexpr std::uint64_t quant_uniform_groups = 32;
static_assert(quant_uniform_groups % philox_uniform_step == 0);

//! On AVX-512, error feedback's scan draws philox_uniform_step groups of uniforms (four
//! 512-bit chains) once every this many groups it scans, so that Philox's arithmetic runs
//! while the scan's loads of g and e wait on memory; a bucket of 512 is drawn within its
//! own scan. On the Zen 4 VM, 2^26 elements, one thread: QSGD error feedback 79.1 -> 71.6
//! ms, TernGrad's 72.4 -> 62.6 ms, stochastic min-max's 72.4 -> 66.5 ms (docs/performance.md).
//! Not done elsewhere: the plain encode reads half as much and got slower (QSGD 50.2 -> 53.8
//! ms); AVX2's eight 256-bit chains need all 16 registers, and its error feedback got slower
//! (TernGrad 86 -> 105 ms); one chain per group scanned was slower still: its rounds wait
//! on each other.
inline constexpr unsigned quant_draw_in_scan = 8;

template <unsigned Bits, bool Stochastic, bool Feedback, class K, class Src>
inline bool quant_encode_task(const K& k, const Src& src, tensor_view residual,
                              const philox16_gen& rng, const quant_out& o, std::uint64_t b_begin,
                              std::uint64_t b_end) {
  bool nonfinite = false;
  vu16 carry = vset1u(0);
  vf16 carry_res = vzero();
  const vu16 zero_code = vset1u(k.zero_code());
  for (std::uint64_t b = b_begin; b < b_end; ++b) {
    const std::uint64_t s = b * o.bucket, e = std::min(o.n, s + o.bucket);
    const std::uint64_t full_begin = (s + 15) / 16, full_end = e / 16;
    alignas(64) float uniforms[16 * quant_uniform_groups];
    // Error feedback draws the uniforms of the bucket's first quant_uniform_groups full
    // groups during the scan (see quant_draw_in_scan); the others are drawn before they
    // are quantized.
    constexpr bool draw_in_scan = Stochastic && Feedback && GRADCODEC_CPU_LEVEL >= 2;
    const std::uint64_t early = draw_in_scan && full_end > full_begin
                                    ? std::min(quant_uniform_groups, full_end - full_begin)
                                    : 0;
    std::uint64_t drawn = 0;  // groups of uniforms filled; may pass early by less than a step
    const auto draw = [&] {
      philox_uniforms(rng, 16 * (full_begin + drawn), philox_uniform_step, uniforms + 16 * drawn);
      drawn += philox_uniform_step;
    };
    const quant_scan sc = quant_scan_bucket<K::range>(src, s, e - s, [&](std::uint64_t j) {
      if constexpr (draw_in_scan) {
        if (j / 16 % quant_draw_in_scan == 0 && drawn < early) draw();
      }
    });
    while (drawn < early) draw();
    nonfinite |= !sc.finite;
    float scale[K::scales];
    const typename K::enc q = k.prepare(src, s, e - s, sc, scale);
    std::memcpy(o.payload + o.l.scales_offset + b * K::scales * 4, scale, sizeof scale);
    typename K::dec d{};
    if constexpr (Feedback) d = k.decode_params(scale);
    // Full groups: quantize and pack.
    const auto full = [&](std::uint64_t g, vf16 u) GRADCODEC_VLAMBDA {
      const std::uint64_t base = g * 16;
      const vf16 v = src.load(base);
      const vu16 code = q.trivial ? zero_code : k.template quantize<Stochastic>(v, u, q);
      pack16<Bits>(o.payload + o.l.codes_offset + 2 * Bits * g, code);
      if constexpr (Feedback)
        quant_vstore(residual.data, residual.type, base, v - k.dequant(code, d));
    };
    // A group shared with the previous or next bucket, or the last group of the tensor: its
    // lanes gather in the carry registers until its last lane is done.
    const auto partial = [&](std::uint64_t g) {
      const std::uint64_t base = g * 16;
      const auto lo = static_cast<unsigned>(s > base ? s - base : 0);
      const auto hi = static_cast<unsigned>(std::min<std::uint64_t>(e - base, 16));
      const auto avail = static_cast<unsigned>(std::min<std::uint64_t>(o.n - base, 16));
      const mask16 m = quant_lanes(lo, hi);
      // Other buckets' lanes are zeroed so that nothing out of range reaches a conversion.
      const vf16 v = vselect(m, quant_load(src, base, avail), vzero());
      vu16 code = zero_code;
      if (!q.trivial) {
        const vf16 u = Stochastic ? vuniform01(philox16(rng, base)) : vzero();
        code = k.template quantize<Stochastic>(v, u, q);
      }
      carry = vselectu(m, code, carry);
      if constexpr (Feedback) carry_res = vselect(m, v - k.dequant(code, d), carry_res);
      if (hi == 16 || base + hi == o.n) {
        quant_store_group<Bits>(o, g, carry);
        if constexpr (Feedback) {
          if (avail == 16)
            vstore_any(residual.data, residual.type, base, carry_res);
          else
            vstore_any_n(residual.data, residual.type, base, carry_res, avail);
        }
        carry = vset1u(0);
        carry_res = vzero();
      }
    };
    if (s % 16 != 0) partial(s / 16);
    if (Stochastic && !q.trivial) {
      // Up to quant_uniform_groups groups' uniforms at a time, drawn ahead here unless the
      // scan drew them.
      for (std::uint64_t g = full_begin; g < full_end; g += quant_uniform_groups) {
        const std::uint64_t cnt = std::min(quant_uniform_groups, full_end - g);
        if (!draw_in_scan || g != full_begin) philox_uniforms(rng, 16 * g, cnt, uniforms);
        for (std::uint64_t j = 0; j < cnt; ++j) full(g + j, vload(uniforms + 16 * j));
      }
    } else {
      for (std::uint64_t g = full_begin; g < full_end; ++g) full(g, vzero());
    }
    // The tail group, unless it was the head group (a bucket inside one group).
    if (e % 16 != 0 && (s % 16 == 0 || e / 16 != s / 16)) partial(e / 16);
  }
  return nonfinite;
}

template <unsigned Bits, class K>
inline void quant_decode_task(const K& k, const detail::decode_call& c,
                              const blocks::bucket_layout& l, std::uint64_t b_begin,
                              std::uint64_t b_end) {
  const std::uint64_t n = c.hdr.n, bucket = c.hdr.group;
  const std::byte* codes = c.payload + l.codes_offset;
  const std::uint64_t room = l.total - l.codes_offset;
  const vf16 alpha = vset1(c.alpha);
  // A large f32 output that nothing reads first: streaming stores save the read of each
  // line before it is written (groups start every 64 bytes from a 64-byte aligned base).
  const bool stream = !c.accumulate && c.out.type == dtype::f32 && n * 4 >= quant_stream_bytes &&
                      reinterpret_cast<std::uintptr_t>(c.out.data) % 64 == 0;
  vf16 carry = vzero();
  for (std::uint64_t b = b_begin; b < b_end; ++b) {
    const std::uint64_t s = b * bucket, e = std::min(n, s + bucket);
    float scale[K::scales];
    std::memcpy(scale, c.payload + l.scales_offset + b * K::scales * 4, sizeof scale);
    const typename K::dec d = k.decode_params(scale);
    for (std::uint64_t g = s / 16; g * 16 < e; ++g) {
      const std::uint64_t base = g * 16, at = 2 * Bits * g;
      if (base >= s && base + 16 <= e) {
        vf16 x = k.dequant(unpack16<Bits>(codes + at), d);
        if (stream) {
          vstream(static_cast<float*>(c.out.data) + base, vcanonical_nan(x));
          continue;
        }
        if (c.accumulate) x = vfma(alpha, x, quant_vload(c.out.data, c.out.type, base));
        quant_vstore(c.out.data, c.out.type, base, vcanonical_nan(x));
        continue;
      }
      const auto lo = static_cast<unsigned>(s > base ? s - base : 0);
      const auto hi = static_cast<unsigned>(std::min<std::uint64_t>(e - base, 16));
      vu16 code;
      if (at + 2 * Bits <= room) {
        code = unpack16<Bits>(codes + at);
      } else {
        std::byte tmp[16] = {};
        std::memcpy(tmp, codes + at, room - at);
        code = unpack16<Bits>(tmp);
      }
      carry = vselect(quant_lanes(lo, hi), k.dequant(code, d), carry);
      if (hi == 16 || base + hi == n) {
        const auto avail = static_cast<unsigned>(std::min<std::uint64_t>(n - base, 16));
        vf16 x = carry;
        if (avail == 16) {
          if (c.accumulate) x = vfma(alpha, x, vload_any(c.out.data, c.out.type, base));
          vstore_any(c.out.data, c.out.type, base, vcanonical_nan(x));
        } else {
          if (c.accumulate) x = vfma(alpha, x, vload_any_n(c.out.data, c.out.type, base, avail));
          vstore_any_n(c.out.data, c.out.type, base, vcanonical_nan(x), avail);
        }
        carry = vzero();
      }
    }
  }
  if (stream) vstream_fence();
}

//! Calls fn.template operator()<Bits, Stochastic>() for the runtime pair, instantiating
//! only the widths in BitsMask (bit b set: b bits) and, unless Stochastic is fixed by
//! Always, both roundings.
template <unsigned BitsMask, bool Always, class Fn>
inline void quant_dispatch(unsigned bits, bool stochastic, Fn&& fn) {
  auto one = [&]<unsigned B>() {
    if constexpr ((BitsMask >> B) & 1u) {
      if (Always || stochastic)
        fn.template operator()<B, true>();
      else if constexpr (!Always)
        fn.template operator()<B, false>();
    }
  };
  switch (bits) {
    case 1: one.template operator()<1>(); break;
    case 2: one.template operator()<2>(); break;
    case 3: one.template operator()<3>(); break;
    case 4: one.template operator()<4>(); break;
    case 5: one.template operator()<5>(); break;
    case 6: one.template operator()<6>(); break;
    case 7: one.template operator()<7>(); break;
    case 8: one.template operator()<8>(); break;
    default: break;
  }
}

//! Encode (Feedback = false) or fused error-feedback encode of one bucketed codec. Fills
//! the payload and hdr.flags / payload_bytes; the caller sets the codec's own fields.
template <unsigned BitsMask, bool Always, bool Feedback, class K>
inline status quant_encode(const K& k, const detail::encode_call& c, tensor_view residual,
                           unsigned bits, bool stochastic) {
  const std::uint64_t n = c.in.n, bucket = c.spec.bucket;
  const quant_out o{c.payload, blocks::bucket_layout_of(n, bucket, K::scales, bits), n, bucket};
  if (o.l.total > c.capacity) return too_small();
  const philox16_gen rng =
      philox16_make(blocks::counter_rng::make(c.ctx.seed, c.ctx.step, c.ctx.tensor_id),
                    blocks::rng_stream::rounding);
  const std::uint64_t per = quant_buckets_per_task(bucket);
  const std::uint64_t tasks = blocks::ceil_div(o.l.buckets, per);
  std::atomic<bool> nonfinite{false};
  quant_dispatch<BitsMask, Always>(bits, stochastic, [&]<unsigned B, bool S>() {
    parallel_for(threads_for(c.threads, tasks), tasks, [&](std::uint64_t t) {
      const std::uint64_t b0 = t * per, b1 = std::min(o.l.buckets, b0 + per);
      bool bad;
      if constexpr (Feedback)
        bad = quant_encode_task<B, S, true>(
            k, quant_feedback_input{c.in.data, c.in.type, residual.data, residual.type}, residual,
            rng, o, b0, b1);
      else
        bad = quant_encode_task<B, S, false>(k, quant_input{c.in.data, c.in.type}, residual, rng, o,
                                             b0, b1);
      if (bad) nonfinite.store(true, std::memory_order_relaxed);
    });
  });
  // Padding: between the scales and the codes, and after the last group's bytes.
  std::memset(c.payload + o.l.scales_bytes, 0, o.l.codes_offset - o.l.scales_bytes);
  const std::uint64_t written =
      std::min(o.l.total - o.l.codes_offset, 2 * std::uint64_t{bits} * blocks::ceil_div(n, 16));
  std::memset(c.payload + o.l.codes_offset + written, 0, o.l.total - o.l.codes_offset - written);
  if (nonfinite.load()) c.hdr.flags |= flag_nonfinite;
  c.hdr.group = static_cast<std::uint32_t>(bucket);
  c.hdr.payload_bytes = o.l.total;
  return {};
}

template <unsigned BitsMask, class K>
inline status quant_decode(const K& k, const detail::decode_call& c, unsigned bits) {
  // Every scale and every code decodes to a defined value (see the reference decoders) and
  // the header fixed every size: nothing in the payload needs validating.
  const blocks::bucket_layout l = blocks::bucket_layout_of(c.hdr.n, c.hdr.group, K::scales, bits);
  const std::uint64_t per = quant_buckets_per_task(c.hdr.group);
  const std::uint64_t tasks = blocks::ceil_div(l.buckets, per);
  quant_dispatch<BitsMask, true>(bits, true, [&]<unsigned B, bool>() {
    parallel_for(threads_for(c.threads, tasks), tasks, [&](std::uint64_t t) {
      const std::uint64_t b0 = t * per;
      quant_decode_task<B>(k, c, l, b0, std::min(l.buckets, b0 + per));
    });
  });
  return {};
}

// ---- Entry points ---------------------------------------------------------------------

inline constexpr unsigned quant_qsgd_bits = 0x1FCu;    // 2..8
inline constexpr unsigned quant_tern_bits = 0x004u;    // 2
inline constexpr unsigned quant_minmax_bits = 0x1FEu;  // 1..8

inline std::size_t qsgd_workspace(const codec_spec&, const_tensor_view, operation) { return 0; }
inline std::size_t terngrad_workspace(const codec_spec&, const_tensor_view, operation) { return 0; }
inline std::size_t minmax_workspace(const codec_spec&, const_tensor_view, operation) { return 0; }

template <bool Feedback>
inline status qsgd_run(const detail::encode_call& c, tensor_view residual) {
  const std::uint32_t s = c.spec.levels;
  const bool stochastic = c.spec.rounding == rounding_mode::stochastic;
  const bool max_norm = c.spec.norm == norm_kind::max;
  const qsgd_kernel k{s, max_norm};
  if (auto st = quant_encode<quant_qsgd_bits, false, Feedback>(k, c, residual, qsgd_code_bits(s),
                                                               stochastic);
      !st.ok())
    return st;
  c.hdr.level = static_cast<std::uint16_t>(s);
  c.hdr.mode = static_cast<std::uint8_t>((stochastic ? mode_stochastic : 0) |
                                         (max_norm ? mode_norm_max : 0));
  return {};
}
inline status qsgd_encode(const detail::encode_call& c) { return qsgd_run<false>(c, {}); }
inline status qsgd_encode_feedback(const detail::feedback_call& f) {
  return qsgd_run<true>(f.enc, f.residual);
}
inline status qsgd_decode(const detail::decode_call& c) {
  const qsgd_kernel k{c.hdr.level, false};
  return quant_decode<quant_qsgd_bits>(k, c, qsgd_code_bits(c.hdr.level));
}

template <bool Feedback>
inline status terngrad_run(const detail::encode_call& c, tensor_view residual) {
  const terngrad_kernel k{c.spec.clip};
  if (auto st = quant_encode<quant_tern_bits, true, Feedback>(k, c, residual, 2, true); !st.ok())
    return st;
  c.hdr.param = c.spec.clip;
  return {};
}
inline status terngrad_encode(const detail::encode_call& c) { return terngrad_run<false>(c, {}); }
inline status terngrad_encode_feedback(const detail::feedback_call& f) {
  return terngrad_run<true>(f.enc, f.residual);
}
inline status terngrad_decode(const detail::decode_call& c) {
  return quant_decode<quant_tern_bits>(terngrad_kernel{0.0f}, c, 2);
}

template <bool Feedback>
inline status minmax_run(const detail::encode_call& c, tensor_view residual) {
  const std::uint32_t bits = c.spec.bits;
  const bool stochastic = c.spec.rounding == rounding_mode::stochastic;
  const minmax_kernel k{(1u << bits) - 1u};
  if (auto st = quant_encode<quant_minmax_bits, false, Feedback>(k, c, residual, bits, stochastic);
      !st.ok())
    return st;
  c.hdr.level = static_cast<std::uint16_t>(bits);
  c.hdr.mode = stochastic ? mode_stochastic : 0;
  return {};
}
inline status minmax_encode(const detail::encode_call& c) { return minmax_run<false>(c, {}); }
inline status minmax_encode_feedback(const detail::feedback_call& f) {
  return minmax_run<true>(f.enc, f.residual);
}
inline status minmax_decode(const detail::decode_call& c) {
  const minmax_kernel k{(1u << c.hdr.level) - 1u};
  return quant_decode<quant_minmax_bits>(k, c, c.hdr.level);
}

// This family's rows of the variant's table (cpu/ops-inl.hpp).
GRADCODEC_CPU_CODEC_ROW(qsgd);
GRADCODEC_CPU_CODEC_ROW(terngrad);
GRADCODEC_CPU_CODEC_ROW(minmax);
