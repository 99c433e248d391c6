// SPDX-License-Identifier: Apache-2.0
//! @file
//! The pieces of a bucketed pass that the quantizers (quant-inl.hpp) and the sign codecs
//! (sign-inl.hpp) share: the prescale of docs/codecs.md "Scaled reductions", lane masks and
//! loads, the canonical sums, the bucket scan, the task split and the payload a task
//! writes. Included inside an ISA namespace after cpu/family-inl.hpp, by each of the two.

// ---- Per bucket ---------------------------------------------------------------------

//! docs/codecs.md "Scaled reductions": down = 2^-e, up = 2^e for the exponent e of m.
struct quant_prescale {
  float down, up;
};
inline quant_prescale quant_prescale_for(float m) {
  const int e =
      std::clamp(static_cast<int>((blocks::float_bits(m) >> 23) & 0xFFu) - 127, -126, 126);
  return {blocks::bits_float(static_cast<std::uint32_t>(127 - e) << 23),
          blocks::bits_float(static_cast<std::uint32_t>(127 + e) << 23)};
}

inline float quant_nan() { return blocks::bits_float(0x7FC00000u); }

inline mask16 quant_lanes(unsigned lo, unsigned hi) {  // lanes [lo, hi), hi <= 16
  return static_cast<mask16>(((1u << hi) - 1u) & ~((1u << lo) - 1u));
}

//! vload_any / vstore_any with each case spelled out, so that the compiler inlines them into
//! the hot loops (an out-of-line call there costs a vzeroupper and spills every register).
inline vf16 quant_vload(const void* base, dtype t, std::uint64_t i) {
  if (t == dtype::f32) return vload(static_cast<const float*>(base) + i);
  if (t == dtype::bf16) return vload_bf16(static_cast<const std::uint16_t*>(base) + i);
  return vload_f16(static_cast<const std::uint16_t*>(base) + i);
}
inline void quant_vstore(void* base, dtype t, std::uint64_t i, vf16 a) {
  if (t == dtype::f32)
    vstore(static_cast<float*>(base) + i, a);
  else if (t == dtype::bf16)
    vstore_bf16(static_cast<std::uint16_t*>(base) + i, a);
  else
    vstore_f16(static_cast<std::uint16_t*>(base) + i, a);
}

//! Elements the bucket scan prefetches ahead of itself: the scan is the only pass that
//! reads from memory, and the bucket's other passes (in cache) would leave the memory idle.
//! Four buckets of 512 ahead, into L2 (prefetcht2): the L2 keeps more misses in flight than
//! the L1's miss buffers, so memory stays busy through a bucket's Philox draws. Against 1024
//! ahead into L1, AVX-512 on Zen 4: QSGD error feedback 90-100 -> 76-81 ms, TernGrad's
//! 89-99 -> 73-83 ms (docs/performance.md).
inline constexpr std::uint64_t quant_prefetch_ahead = 2048;

//! Encode input: v = in[i].
struct quant_input {
  const void* data;
  dtype type;
  void prefetch(std::uint64_t i) const { prefetch_element<1>(data, type, i); }
  vf16 load(std::uint64_t i) const { return quant_vload(data, type, i); }
  vf16 load_n(std::uint64_t i, unsigned cnt) const { return vload_any_n(data, type, i, cnt); }
};

//! Error-feedback input: p = g[i] + e[i] in f32, as in the generic composition.
struct quant_feedback_input {
  const void* g;
  dtype gt;
  const void* e;
  dtype et;
  void prefetch(std::uint64_t i) const {
    prefetch_element<1>(g, gt, i);
    prefetch_element<1>(e, et, i);
  }
  vf16 load(std::uint64_t i) const {
    return vadd_nan_first(quant_vload(g, gt, i), quant_vload(e, et, i));
  }
  vf16 load_n(std::uint64_t i, unsigned cnt) const {
    return vadd_nan_first(vload_any_n(g, gt, i, cnt), vload_any_n(e, et, i, cnt));
  }
};

//! Lanes [0, cnt) of element i on (cnt <= 16); the others +0.0.
template <class Src>
GRADCODEC_VINLINE vf16 quant_load(const Src& src, std::uint64_t i, unsigned cnt) {
  return cnt == 16 ? src.load(i) : src.load_n(i, cnt);
}

//! The canonical sum of docs/codecs.md over term(j, cnt) (the 16 values j..j+15 of the
//! bucket, cnt of them real): lane j of each 256-value chunk adds values j, j+16, ... in
//! order, the fold is 8, 4, 2, 1, chunk sums merge pairwise (binary counter).
template <class Term>
inline float quant_canonical_sum(std::uint64_t len, const Term& term) {
  blocks::pairwise_sum sum;
  for (std::uint64_t c0 = 0; c0 < len; c0 += 256) {
    const std::uint64_t cend = std::min(len, c0 + 256);
    vf16 acc = vzero();
    std::uint64_t j = c0;
    for (; j + 16 <= cend; j += 16) acc = acc + term(j, 16u);
    if (j < cend) {
      const auto cnt = static_cast<unsigned>(cend - j);
      // Missing values add +0.0, which leaves a lane unchanged (a lane is never -0.0).
      acc = acc + vselect(quant_lanes(0, cnt), term(j, cnt), vzero());
    }
    sum.push(vfold(acc));
  }
  return sum.total();
}

//! One bucket's scan: all values finite? max |v| (bits of the largest |v| are the largest
//! |v| bits, so an integer max finds both), and for minmax lo/hi of v + 0.0f.
struct quant_scan {
  bool finite;
  float max_abs, lo, hi;
};

//! side(j) runs once per 16 values scanned, j the offset of the first in the bucket: work
//! that needs no memory (Philox draws) fills the time the scan waits on its loads.
template <bool Range, class Src, class Side>
inline quant_scan quant_scan_bucket(const Src& src, std::uint64_t s, std::uint64_t len,
                                    Side&& side) {
  const vu16 abs_mask = vset1u(0x7FFFFFFFu);
  vu16 mag = vset1u(0);
  const float inf = std::numeric_limits<float>::infinity();
  vf16 lo = vset1(inf), hi = vset1(-inf);
  std::uint64_t j = 0;
  for (; j + 16 <= len; j += 16) {
    src.prefetch(s + j + quant_prefetch_ahead);
    const vf16 v = src.load(s + j);
    side(j);
    mag = vmaxu(mag, vbits(v) & abs_mask);
    if constexpr (Range) {
      const vf16 w = v + vzero();  // -0.0 -> +0.0
      lo = vmin(lo, w);
      hi = vmax(hi, w);
    }
  }
  if (j < len) {
    const auto cnt = static_cast<unsigned>(len - j);
    const vf16 v = src.load_n(s + j, cnt);  // missing lanes +0.0: no effect on max |v|
    mag = vmaxu(mag, vbits(v) & abs_mask);
    if constexpr (Range) {
      const mask16 m = quant_lanes(0, cnt);
      const vf16 w = v + vzero();
      lo = vmin(lo, vselect(m, w, vset1(inf)));
      hi = vmax(hi, vselect(m, w, vset1(-inf)));
    }
  }
  std::uint32_t mags[16];
  vstore_u(mags, mag);
  std::uint32_t top = 0;
  for (std::uint32_t x : mags) top = std::max(top, x);
  quant_scan r{top < 0x7F800000u, blocks::bits_float(top), inf, -inf};
  if constexpr (Range) {
    // Finite values without -0.0: min and max do not depend on the order.
    float l[16], h[16];
    vstore(l, lo);
    vstore(h, hi);
    for (int k = 0; k < 16; ++k) {
      if (l[k] < r.lo) r.lo = l[k];
      if (h[k] > r.hi) r.hi = h[k];
    }
  }
  return r;
}

// ---- Tasks ---------------------------------------------------------------------------

//! Buckets per task: about stream_grain elements, and a multiple of 16 elements so that no
//! group of 16 codes is split between tasks.
inline std::uint64_t quant_buckets_per_task(std::uint64_t bucket) {
  std::uint64_t align = 1;
  while ((align * bucket) % 16 != 0) align *= 2;
  const std::uint64_t per = std::max<std::uint64_t>(1, stream_grain / bucket);
  return (per + align - 1) / align * align;
}

//! Decoded f32 outputs from this size on are written with streaming stores: well past the
//! last-level cache of current x86 parts, so the values would not stay cached anyway.
inline constexpr std::uint64_t quant_stream_bytes = std::uint64_t{64} << 20;

//! Where a task writes: the payload and its layout.
struct quant_out {
  std::byte* payload;
  blocks::bucket_layout l;
  std::uint64_t n, bucket;
};
