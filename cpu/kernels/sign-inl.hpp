// SPDX-License-Identifier: Apache-2.0
//! @file
//! Sign codecs: sign (signSGD, scaled sign) and onebit (1-bit SGD, two means per bucket)
//! (docs/codecs.md "sign", "onebit"): encode, decode, decode-accumulate and fused error
//! feedback, bit-identical to reference/sign.cpp and reference/onebit.cpp, on the bucket
//! pieces of bucket-inl.hpp (prescale, canonical sum, task split, payload layout). Included
//! inside an ISA namespace after cpu/family-inl.hpp.
//!
//! Encode, per bucket, the bucket staying in L1/L2 after its first read:
//! 1. scan (from memory): max |v|, non-finite, onebit's count of negatives; when buckets start
//!    on a multiple of 16 elements the compare mask of each 16 values is stored as the 2
//!    code bytes right away (a non-finite bucket zeroes its bytes afterwards);
//! 2. scales: the canonical sums of the formula (16 lanes relative to the bucket start);
//!    other bucket sizes OR the bits of a finite bucket into zeroed bytes here;
//! 3. error feedback only: e = p - decode(p) from the scales just computed.
//! Threads take tasks of whole buckets starting on a multiple of 16 elements, so code bytes
//! are never shared between tasks. Decode selects one of two per-bucket values per bit; a
//! large f32 output is written with streaming stores.

#include "bucket-inl.hpp"

//! What a bucket's scales are: sign's three scale kinds, or onebit's two means.
enum class sign_rule : std::uint8_t { none, mean, l2, onebit };

inline constexpr unsigned sign_scales(sign_rule r) { return r == sign_rule::onebit ? 2u : 1u; }

//! Buckets up to this many elements prefetch the next bucket during their in-cache passes.
inline constexpr std::uint64_t sign_prefetch_max = 4096;

//! The decoded values of a bucket: neg where the bit is 1, pos where it is 0.
struct sign_values {
  vf16 neg, pos;
};
inline sign_values sign_values_of(const float* scale, bool onebit) {
  if (onebit) return {vset1(canonical_nan(scale[0])), vset1(canonical_nan(scale[1]))};
  // A NaN scale (non-finite bucket) decodes as the canonical NaN whatever the bit; else -s
  // flips the sign bit, as the reference's negation.
  const float s = canonical_nan(scale[0]);
  return {vset1(std::isnan(s) ? s : -s), vset1(s)};
}

//! Encode input v = in[i], and error-feedback input p = g[i] + e[i] (f32, as the generic
//! composition), with the dtypes fixed at compile time so that the loads inline.
//! prefetch(i) asks for the cache line of element i.
template <dtype T>
inline void sign_prefetch(const void* base, std::uint64_t i) {
  __builtin_prefetch(static_cast<const std::byte*>(base) + i * (T == dtype::f32 ? 4 : 2));
}
template <dtype T>
struct sign_input {
  const void* data;
  vf16 load(std::uint64_t i) const { return vload_typed<T>(data, i); }
  vf16 load_n(std::uint64_t i, unsigned cnt) const { return vload_typed_n<T>(data, i, cnt); }
  void prefetch(std::uint64_t i) const { sign_prefetch<T>(data, i); }
};
template <dtype G, dtype E>
struct sign_feedback_input {
  const void* g;
  const void* e;
  vf16 load(std::uint64_t i) const {
    return vadd_nan_first(vload_typed<G>(g, i), vload_typed<E>(e, i));
  }
  vf16 load_n(std::uint64_t i, unsigned cnt) const {
    return vadd_nan_first(vload_typed_n<G>(g, i, cnt), vload_typed_n<E>(e, i, cnt));
  }
  void prefetch(std::uint64_t i) const {
    sign_prefetch<G>(g, i);
    sign_prefetch<E>(e, i);
  }
};

//! The code bits of elements i..i+15 of the stream of `bytes` bytes (bits past it read 0).
inline mask16 sign_get16(const std::byte* codes, std::uint64_t bytes, std::uint64_t i) {
  const std::uint64_t at = i / 8;  // < bytes: element i exists
  std::uint32_t w = 0;
  if (at + 4 <= bytes)
    std::memcpy(&w, codes + at, 4);
  else
    for (std::uint64_t k = at; k < bytes; ++k)
      w |= static_cast<std::uint32_t>(codes[k]) << (8 * (k - at));
  return static_cast<mask16>(w >> (i % 8));
}

//! ORs the bits of m (elements i..i+15) into the stream; touches only the bytes up to the
//! highest set bit, all of which hold elements from i on.
inline void sign_or16(std::byte* codes, std::uint64_t i, mask16 m) {
  std::uint32_t x = static_cast<std::uint32_t>(m) << (i % 8);
  for (std::byte* p = codes + i / 8; x != 0; x >>= 8, ++p) *p |= static_cast<std::byte>(x & 0xFFu);
}

struct sign_scan {
  bool finite;
  float max_abs;
  std::uint64_t negatives;
};

//! Pass 1 over bucket [s, s + len): finite? max |v| (the largest magnitude bits are the
//! largest |v|), the number of v < 0; with Store (s % 16 == 0) the code bytes, with Keep
//! the values themselves at keep[s..s + len).
template <bool Store, bool Keep, class Src>
inline sign_scan sign_scan_bucket(const Src& src, std::uint64_t s, std::uint64_t len,
                                  std::byte* codes, float* keep) {
  const vu16 abs_mask = vset1u(0x7FFFFFFFu);
  vu16 mag = vset1u(0);
  std::uint64_t negatives = 0;
  std::uint64_t j = 0;
  for (; j + 16 <= len; j += 16) {
    const vf16 v = src.load(s + j);
    if constexpr (Keep) vstore(keep + s + j, v);
    mag = vmaxu(mag, vbits(v) & abs_mask);
    const mask16 m = vlt(v, vzero());
    negatives += vpopcount(m);
    if constexpr (Store) std::memcpy(codes + (s + j) / 8, &m, 2);
  }
  if (j < len) {
    const auto cnt = static_cast<unsigned>(len - j);
    const vf16 v = src.load_n(s + j, cnt);  // missing lanes +0.0: neither max nor negative
    if constexpr (Keep) vstore_n(keep + s + j, v, cnt);
    mag = vmaxu(mag, vbits(v) & abs_mask);
    const mask16 m = vlt(v, vzero());
    negatives += vpopcount(m);
    // Only the last bucket of the tensor is cut short: its bytes end the stream.
    if constexpr (Store) std::memcpy(codes + (s + j) / 8, &m, (cnt + 7) / 8);
  }
  std::uint32_t mags[16];
  vstore_u(mags, mag);
  std::uint32_t top = 0;
  for (std::uint32_t x : mags) top = std::max(top, x);
  return {top < 0x7F800000u, blocks::bits_float(top), negatives};
}

//! Two canonical sums over the same group in one pass (onebit's negative and non-negative
//! parts): term(j, cnt) returns the terms of values j..j+15 of the group as {a, b}, cnt of
//! them real. Each sum is exactly quant_canonical_sum of its terms.
struct sign_pair {
  vf16 a, b;
};
template <class Term>
inline void sign_canonical_sum2(std::uint64_t len, const Term& term, float& sum_a, float& sum_b) {
  blocks::pairwise_sum pa, pb;
  for (std::uint64_t c0 = 0; c0 < len; c0 += 256) {
    const std::uint64_t cend = std::min(len, c0 + 256);
    vf16 acc_a = vzero(), acc_b = vzero();
    std::uint64_t j = c0;
    for (; j + 16 <= cend; j += 16) {
      const sign_pair t = term(j, 16u);
      acc_a = acc_a + t.a;
      acc_b = acc_b + t.b;
    }
    if (j < cend) {
      const auto cnt = static_cast<unsigned>(cend - j);
      const sign_pair t = term(j, cnt);
      // Missing values add +0.0, which leaves a lane unchanged (a lane is never -0.0).
      acc_a = acc_a + vselect(quant_lanes(0, cnt), t.a, vzero());
      acc_b = acc_b + vselect(quant_lanes(0, cnt), t.b, vzero());
    }
    pa.push(vfold(acc_a));
    pb.push(vfold(acc_b));
  }
  sum_a = pa.total();
  sum_b = pb.total();
}

//! Pass 2: the scales of bucket [s, s + len) (docs/codecs.md, in the formulas' order).
//! The first sum calls ahead(j) for each 16 values (prefetch of the next bucket).
template <sign_rule R, class Src, class Ahead>
inline void sign_scales_of(const Src& src, std::uint64_t s, std::uint64_t len, const sign_scan& sc,
                           float* scale, const Ahead& ahead) {
  if (!sc.finite) {
    for (unsigned k = 0; k < sign_scales(R); ++k) scale[k] = quant_nan();
    return;
  }
  if constexpr (R == sign_rule::none) {
    scale[0] = 1.0f;
  } else {
    const quant_prescale p = quant_prescale_for(sc.max_abs);
    const vf16 down = vset1(p.down);
    if constexpr (R == sign_rule::mean) {
      const float sum =
          quant_canonical_sum(len, [&](std::uint64_t j, unsigned cnt) GRADCODEC_VLAMBDA {
            ahead(j);
            return vabs(quant_load(src, s + j, cnt)) * down;
          });
      scale[0] = (sum / static_cast<float>(len)) * p.up;
    } else if constexpr (R == sign_rule::l2) {
      const float sum =
          quant_canonical_sum(len, [&](std::uint64_t j, unsigned cnt) GRADCODEC_VLAMBDA {
            ahead(j);
            const vf16 t = quant_load(src, s + j, cnt) * down;
            return t * t;
          });
      scale[0] = std::sqrt(sum / static_cast<float>(len)) * p.up;
    } else {
      // Finite values: v >= 0 is exactly "not v < 0"; -0.0 adds -0.0, which changes no sum.
      float sum_neg, sum_pos;
      sign_canonical_sum2(
          len,
          [&](std::uint64_t j, unsigned cnt) GRADCODEC_VLAMBDA {
            ahead(j);
            const vf16 v = quant_load(src, s + j, cnt);
            const vf16 t = v * down;
            const vu16 neg = vlt_bits(v, vzero());
            return sign_pair{vselect_bits(neg, t, vzero()), vselect_bits(neg, vzero(), t)};
          },
          sum_neg, sum_pos);
      const std::uint64_t neg = sc.negatives, pos = len - sc.negatives;
      scale[0] = neg > 0 ? (sum_neg / static_cast<float>(neg)) * p.up : 0.0f;
      scale[1] = pos > 0 ? (sum_pos / static_cast<float>(pos)) * p.up : 0.0f;
    }
  }
}

//! The code bits of a finite bucket that does not start on a multiple of 16 elements.
template <class Src>
inline void sign_or_bucket(const Src& src, std::uint64_t s, std::uint64_t len, std::byte* codes) {
  std::uint64_t j = 0;
  for (; j + 16 <= len; j += 16) sign_or16(codes, s + j, vlt(src.load(s + j), vzero()));
  if (j < len)
    sign_or16(codes, s + j,
              vlt(src.load_n(s + j, static_cast<unsigned>(len - j)), vzero()));  // missing: 0
}

//! Pass 3 (error feedback): e = p - decode(p) over bucket [s, s + len), with the bits of p
//! (a non-finite bucket decodes to its NaN scale whatever the bit).
template <dtype E, class Src, class Ahead>
inline void sign_residual(const Src& src, std::uint64_t s, std::uint64_t len, const sign_values& d,
                          void* residual, const Ahead& ahead) {
  std::uint64_t j = 0;
  for (; j + 16 <= len; j += 16) {
    ahead(j);
    const vf16 v = src.load(s + j);
    vstore_typed<E>(residual, s + j, v - vselect_bits(vlt_bits(v, vzero()), d.neg, d.pos));
  }
  if (j < len) {
    const auto cnt = static_cast<unsigned>(len - j);
    const vf16 v = src.load_n(s + j, cnt);
    vstore_typed_n<E>(residual, s + j, v - vselect_bits(vlt_bits(v, vzero()), d.neg, d.pos), cnt);
  }
}

//! Buckets [b0, b1) of one task; returns whether one held NaN/Inf.
template <sign_rule R, bool Feedback, dtype E, class Src>
inline bool sign_encode_task(const Src& src, void* residual, const quant_out& o, std::uint64_t b0,
                             std::uint64_t b1) {
  constexpr unsigned S = sign_scales(R);
  // With an f32 residual the scan stores p = g + e there, and the later passes read p back
  // from it: one stream instead of two. (p must stay f32: other dtypes would round it.)
  constexpr bool keep = Feedback && E == dtype::f32;
  std::byte* codes = o.payload + o.l.codes_offset;
  const bool aligned = o.bucket % 16 == 0;
  if (!aligned) {
    // The task's elements start on a multiple of 16 and end on one (or at n): whole bytes.
    const std::uint64_t first = b0 * o.bucket / 8, end = (std::min(o.n, b1 * o.bucket) + 7) / 8;
    std::memset(codes + first, 0, end - first);
  }
  bool nonfinite = false;
  for (std::uint64_t b = b0; b < b1; ++b) {
    const std::uint64_t s = b * o.bucket, len = std::min(o.n - s, o.bucket);
    // The first in-cache pass prefetches the next bucket, so that memory stays busy while
    // this one is computed; only when both fit in L1 together.
    const std::uint64_t next = s + len, next_end = std::min(o.n, next + len);
    const bool prefetch = len <= sign_prefetch_max;
    const auto ahead = [&](std::uint64_t j) {
      if (prefetch && next + j < next_end) src.prefetch(next + j);
    };
    const auto no_ahead = [](std::uint64_t) {};
    auto* kept = static_cast<float*>(residual);
    const sign_scan sc = aligned ? sign_scan_bucket<true, keep>(src, s, len, codes, kept)
                                 : sign_scan_bucket<false, keep>(src, s, len, codes, kept);
    const auto finish = [&](const auto& in) {
      float scale[S];
      sign_scales_of<R>(in, s, len, sc, scale, ahead);
      std::memcpy(o.payload + o.l.scales_offset + b * S * 4, scale, sizeof scale);
      if (!sc.finite) {
        nonfinite = true;
        // Its bits are 0; with aligned buckets its bytes are its own.
        if (aligned) std::memset(codes + s / 8, 0, (s + len + 7) / 8 - s / 8);
      } else if (!aligned) {
        sign_or_bucket(in, s, len, codes);
      }
      if constexpr (Feedback) {
        const sign_values d = sign_values_of(scale, R == sign_rule::onebit);
        if constexpr (R == sign_rule::none)
          sign_residual<E>(in, s, len, d, residual, ahead);  // the first in-cache pass
        else
          sign_residual<E>(in, s, len, d, residual, no_ahead);
      }
    };
    if constexpr (keep)
      finish(sign_input<dtype::f32>{residual});
    else
      finish(src);
  }
  return nonfinite;
}

//! Encode (Feedback = false) or fused error-feedback encode with rule R. Fills the payload,
//! hdr.flags, group and payload_bytes; the caller sets mode.
template <sign_rule R, bool Feedback>
inline status sign_encode_run(const detail::encode_call& c, tensor_view residual) {
  const std::uint64_t n = c.in.n, bucket = c.spec.bucket;
  const quant_out o{c.payload, blocks::bucket_layout_of(n, bucket, sign_scales(R), 1), n, bucket};
  if (o.l.total > c.capacity) return too_small();
  const std::uint64_t per = quant_buckets_per_task(bucket);
  const std::uint64_t tasks = blocks::ceil_div(o.l.buckets, per);
  std::atomic<bool> nonfinite{false};
  const auto run = [&]<dtype E>(const auto& src) {
    parallel_for(threads_for(c.threads, tasks), tasks, [&](std::uint64_t t) {
      const std::uint64_t b0 = t * per, b1 = std::min(o.l.buckets, b0 + per);
      if (sign_encode_task<R, Feedback, E>(src, residual.data, o, b0, b1))
        nonfinite.store(true, std::memory_order_relaxed);
    });
  };
  with_dtype(c.in.type, [&]<dtype G>() {
    if constexpr (Feedback)
      with_dtype(residual.type, [&]<dtype E>() {
        run.template operator()<E>(sign_feedback_input<G, E>{c.in.data, residual.data});
      });
    else
      run.template operator()<dtype::f32>(sign_input<G>{c.in.data});
  });
  // Padding: between the scales and the codes, and after the codes.
  std::memset(c.payload + o.l.scales_bytes, 0, o.l.codes_offset - o.l.scales_bytes);
  std::memset(c.payload + o.l.codes_offset + o.l.codes_bytes, 0,
              o.l.total - o.l.codes_offset - o.l.codes_bytes);
  if (nonfinite.load()) c.hdr.flags |= flag_nonfinite;
  c.hdr.group = static_cast<std::uint32_t>(bucket);
  c.hdr.payload_bytes = o.l.total;
  return {};
}

//! Writes decoded values x (lanes [0, cnt)) at element i of out (dtype O): store, or with
//! Acc acc = fma(alpha, x, acc); Stream (f32, cnt = 16, 64-byte aligned): streaming store.
template <dtype O, bool Acc, bool Stream>
inline void sign_emit(void* out, vf16 alpha, std::uint64_t i, unsigned cnt, vf16 x) {
  if (cnt == 16) {
    if constexpr (Stream) {
      vstream(static_cast<float*>(out) + i, x);
    } else {
      if constexpr (Acc) x = vcanonical_nan(vfma(alpha, x, vload_typed<O>(out, i)));
      vstore_typed<O>(out, i, x);
    }
  } else {
    if constexpr (Acc) x = vcanonical_nan(vfma(alpha, x, vload_typed_n<O>(out, i, cnt)));
    vstore_typed_n<O>(out, i, x, cnt);
  }
}

//! Decodes buckets [b0, b1). Stream: each bucket is split into a head up to a 64-byte
//! boundary of the output, whole 64-byte lines (streaming stores), and a tail.
template <dtype O, bool Acc, bool Stream>
inline void sign_decode_task(const detail::decode_call& c, const blocks::bucket_layout& l,
                             bool onebit, std::uint64_t b0, std::uint64_t b1) {
  const std::uint64_t n = c.hdr.n, bucket = c.hdr.group;
  const unsigned per = onebit ? 2u : 1u;
  const std::byte* codes = c.payload + l.codes_offset;
  void* out = c.out.data;
  const vf16 alpha = vset1(c.alpha);
  for (std::uint64_t b = b0; b < b1; ++b) {
    const std::uint64_t s = b * bucket, e = std::min(n, s + bucket);
    float scale[2] = {};
    std::memcpy(scale, c.payload + l.scales_offset + b * per * 4, per * 4);
    const sign_values d = sign_values_of(scale, onebit);
    const auto value = [&](std::uint64_t i) {
      return vselect(sign_get16(codes, l.codes_bytes, i), d.neg, d.pos);
    };
    std::uint64_t i = s;
    if constexpr (Stream) {
      // Elements to the next 64-byte boundary (the output is 4-byte aligned).
      const auto head = static_cast<unsigned>(
          std::min<std::uint64_t>(e - i, elements_to_line(static_cast<float*>(out) + i, 4)));
      if (head > 0) {
        sign_emit<O, Acc, false>(out, alpha, i, head, value(i));
        i += head;
      }
    }
    for (; i + 16 <= e; i += 16) sign_emit<O, Acc, Stream>(out, alpha, i, 16, value(i));
    if (i < e) sign_emit<O, Acc, false>(out, alpha, i, static_cast<unsigned>(e - i), value(i));
  }
  if constexpr (Stream) vstream_fence();
}

inline status sign_decode_run(const detail::decode_call& c, bool onebit) {
  // Every scale and bit pattern decodes to a defined value and the header fixed every size:
  // nothing in the payload needs validating.
  const std::uint64_t n = c.hdr.n, bucket = c.hdr.group;
  const blocks::bucket_layout l = blocks::bucket_layout_of(n, bucket, onebit ? 2 : 1, 1);
  const std::uint64_t per = quant_buckets_per_task(bucket);
  const std::uint64_t tasks = blocks::ceil_div(l.buckets, per);
  const bool stream = !c.accumulate && c.out.type == dtype::f32 && n * 4 >= stream_store_bytes &&
                      reinterpret_cast<std::uintptr_t>(c.out.data) % 4 == 0;
  with_dtype(c.out.type, [&]<dtype O>() {
    parallel_for(threads_for(c.threads, tasks), tasks, [&](std::uint64_t t) {
      const std::uint64_t b0 = t * per, b1 = std::min(l.buckets, b0 + per);
      if (c.accumulate)
        sign_decode_task<O, true, false>(c, l, onebit, b0, b1);
      else if (O == dtype::f32 && stream)
        sign_decode_task<O, false, O == dtype::f32>(c, l, onebit, b0, b1);
      else
        sign_decode_task<O, false, false>(c, l, onebit, b0, b1);
    });
  });
  return {};
}

// ---- Entry points ---------------------------------------------------------------------

inline std::size_t sign_workspace(const codec_spec&, const_tensor_view, operation) { return 0; }
inline std::size_t onebit_workspace(const codec_spec&, const_tensor_view, operation) { return 0; }

template <bool Feedback>
inline status sign_run(const detail::encode_call& c, tensor_view residual) {
  status st;
  switch (c.spec.scale) {
    case scale_kind::none: st = sign_encode_run<sign_rule::none, Feedback>(c, residual); break;
    case scale_kind::mean: st = sign_encode_run<sign_rule::mean, Feedback>(c, residual); break;
    case scale_kind::l2: st = sign_encode_run<sign_rule::l2, Feedback>(c, residual); break;
  }
  if (!st.ok()) return st;
  c.hdr.mode = static_cast<std::uint8_t>(static_cast<unsigned>(c.spec.scale) << mode_scale_shift);
  return {};
}
inline status sign_encode(const detail::encode_call& c) { return sign_run<false>(c, {}); }
inline status sign_encode_feedback(const detail::feedback_call& f) {
  return sign_run<true>(f.enc, f.residual);
}
inline status sign_decode(const detail::decode_call& c) { return sign_decode_run(c, false); }

inline status onebit_encode(const detail::encode_call& c) {
  return sign_encode_run<sign_rule::onebit, false>(c, {});
}
inline status onebit_encode_feedback(const detail::feedback_call& f) {
  return sign_encode_run<sign_rule::onebit, true>(f.enc, f.residual);
}
inline status onebit_decode(const detail::decode_call& c) { return sign_decode_run(c, true); }

// This family's rows of the variant's table (cpu/ops-inl.hpp).
GRADCODEC_CPU_CODEC_ROW(onebit);
GRADCODEC_CPU_CODEC_ROW(sign);
