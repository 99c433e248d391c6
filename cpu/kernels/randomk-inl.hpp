// SPDX-License-Identifier: Apache-2.0
//! @file
//! Random-k (docs/codecs.md "Sparsification"): one element per stratum, drawn with the
//! vectorised Philox of philox-inl.hpp, so every rank and backend draws the same indices.
//! Included inside an ISA namespace after cpu/family-inl.hpp.

#include "select-inl.hpp"  // psource: the input, or p = g + e under error feedback

//! Stratum bounds lo_j = floor(j * n / k), walked incrementally (n = q * k + r): one 128-bit
//! division per task instead of one per stratum.
struct strata_walk {
  std::uint64_t n, k, q, r, lo = 0, rem = 0;
  strata_walk(std::uint64_t n_, std::uint64_t k_, std::uint64_t j)
      : n(n_), k(k_), q(n_ / k_), r(n_ % k_) {
    const u128 p = static_cast<u128>(j) * n;
    lo = static_cast<std::uint64_t>(p / k);
    rem = static_cast<std::uint64_t>(p % k);
  }
  void next() {
    lo += q;
    rem += r;
    if (rem >= k) {
      rem -= k;
      ++lo;
    }
  }
};

//! Up to 16 consecutive strata: the chosen index and size of each, and the elements they
//! cover, [first, end).
struct strata_batch {
  unsigned count;
  std::uint64_t first, end;
  std::uint64_t index[16], size[16];
};

//! Batches drawn ahead of the one being processed. The callers prefetch each drawn index into
//! L2 (prefetcht2: the L2 tracks more misses than the L1, whose miss buffers a prefetcht0
//! of this many lines fills and stalls on), so about 16 * strata_ahead fetches are in
//! flight. On Zen 4, 2^26 elements at 1 %: 12.2 ms with prefetcht0 three batches ahead,
//! 7-8 ms with prefetcht2 eight ahead (docs/performance.md).
inline constexpr unsigned strata_ahead = 8;

//! Strata [j0, j1) in batches of 16 (j0 a multiple of 16, for philox16): fn(batch) for
//! each. Batches are drawn strata_ahead ahead of fn, and touch(index) called for the
//! indices of each drawn batch (a prefetch), so the memory accesses overlap the work.
template <class Touch, class Fn>
inline void randomk_strata(const philox16_gen& g, std::uint64_t n, std::uint64_t k,
                           std::uint64_t j0, std::uint64_t j1, const Touch& touch, const Fn& fn) {
  strata_walk w(n, k, j0);
  strata_batch ring[strata_ahead + 1];
  auto draw = [&](strata_batch& bt, std::uint64_t j) {
    bt.count = j1 - j >= 16 ? 16u : static_cast<unsigned>(j1 - j);
    bt.first = w.lo;
    std::uint32_t rnd[16];
    vstore_u(rnd, philox16(g, j));
    for (unsigned l = 0; l < bt.count; ++l) {
      const std::uint64_t lo = w.lo;
      w.next();
      bt.size[l] = w.lo - lo;
      bt.index[l] = lo + blocks::scale_u32(rnd[l], bt.size[l]);
      touch(bt.index[l]);
    }
    bt.end = w.lo;
  };
  std::uint64_t drawn = j0;
  for (unsigned a = 0; a < strata_ahead && drawn < j1; ++a, drawn += 16) draw(ring[a], drawn);
  unsigned cur = 0;
  for (std::uint64_t j = j0; j < j1; j += 16) {
    if (drawn < j1) {
      draw(ring[(cur + strata_ahead) % (strata_ahead + 1)], drawn);
      drawn += 16;
    }
    fn(ring[cur]);
    cur = (cur + 1) % (strata_ahead + 1);
  }
}

//! Strata per task: a multiple of 16 covering about sel_grain elements (decode and error
//! feedback stream their elements) or 4096 strata (encode reads only the sent values).
inline std::uint64_t randomk_task_strata(std::uint64_t n, std::uint64_t k, bool streams) {
  if (!streams || n == 0) return 4096;
  const auto want = static_cast<std::uint64_t>(static_cast<u128>(k) * sel_grain / n);
  return std::max<std::uint64_t>(16, want / 16 * 16);
}

inline std::size_t randomk_workspace(const codec_spec&, const_tensor_view, operation) { return 0; }

//! Elements the error-feedback stream prefetches ahead of itself, into L1 (locality 3): for
//! this plain stream that beat the quantizers' four buckets into L2 (AVX-512 on Zen 4, 1 %:
//! 42-44 against 44-53 ms).
inline constexpr std::uint64_t randomk_stream_ahead = 1024;

inline status randomk_run(const detail::encode_call& c, const psource& source, tensor_view res) {
  const std::uint64_t n = c.in.n, k = sparse_count(c.spec, n);
  const dtype wire = c.wire;
  const std::uint64_t vsize = dtype_size(wire);
  const blocks::randomk_layout l = blocks::randomk_layout_of(k, vsize);
  if (l.total > c.capacity) return too_small();
  const auto rng = blocks::counter_rng::make(c.ctx.seed, c.ctx.step, c.ctx.tensor_id);
  const std::uint32_t key[4] = {rng.key.k0, rng.key.k1, rng.step_lo, rng.tensor_lo};
  std::memcpy(c.payload + l.key_offset, key, 16);
  std::byte* values = c.payload + l.values_offset;
  std::memset(values + k * vsize, 0, l.total - l.values_offset - k * vsize);
  const bool unbiased = c.spec.unbiased;
  const philox16_gen g = philox16_make(rng, blocks::rng_stream::selection);
  const std::uint64_t per = randomk_task_strata(n, k, res.data != nullptr);
  const std::uint64_t tasks = blocks::ceil_div(k, per);
  auto touch = [&](std::uint64_t i) { prefetch_element<1>(source.g, source.tg, i); };
  std::atomic<bool> bad{false};
  // The value sent for stratum j (v at its chosen index): x to the payload, v - decoded(x)
  // is what error feedback keeps there.
  auto send = [&](std::uint64_t j, float v, std::uint64_t size) {
    const float x = unbiased ? v * static_cast<float>(size) : v;
    put_value(values + j * vsize, wire, x);
    return v - wire_roundtrip(x, wire);
  };
  visit_source(source, [&](const auto& src) {
    parallel_for(threads_for(c.threads, tasks), tasks, [&](std::uint64_t t) {
      const std::uint64_t j0 = t * per, j1 = std::min(k, j0 + per);
      bool nonfinite = false;
      std::uint64_t j = j0;
      if (!res.data) {
        // Only the k sent values are read, each prefetched a few batches ahead.
        randomk_strata(g, n, k, j0, j1, touch, [&](const strata_batch& bt) {
          for (unsigned q = 0; q < bt.count; ++q, ++j) {
            const float v = src.load1(bt.index[q]);
            nonfinite |= !std::isfinite(v);
            send(j, v, bt.size[q]);
          }
        });
      } else {
        // Error feedback streams every element (p, or p - decoded at the sent ones) and takes
        // the sent values from the stream, prefetched ahead by hand (without, this loop ran at
        // half the speed of the other codecs' error feedback: docs/performance.md).
        const auto no_touch = [](std::uint64_t) {};
        randomk_strata(g, n, k, j0, j1, no_touch, [&](const strata_batch& bt) {
          unsigned q = 0;
          for (std::uint64_t i = bt.first; i < bt.end; i += 16) {
            const unsigned r = bt.end - i >= 16 ? 16u : static_cast<unsigned>(bt.end - i);
            prefetch_element<3>(source.g, source.tg, i + randomk_stream_ahead);
            prefetch_element<3>(source.e, source.te, i + randomk_stream_ahead);
            vf16 p = r == 16 ? src.load(i) : src.load_n(i, r);
            if (q < bt.count && bt.index[q] < i + r) {
              float lanes[16];
              vstore(lanes, p);
              for (; q < bt.count && bt.index[q] < i + r; ++q, ++j) {
                float& v = lanes[bt.index[q] - i];
                nonfinite |= !std::isfinite(v);
                v = send(j, v, bt.size[q]);
              }
              p = vload(lanes);
            }
            if (r == 16)
              vstore_any(res.data, res.type, i, p);
            else
              vstore_any_n(res.data, res.type, i, p, r);
          }
        });
      }
      if (nonfinite) bad.store(true, std::memory_order_relaxed);
    });
  });
  c.hdr.count = k;
  if (unbiased) c.hdr.mode |= mode_unbiased;
  if (bad.load()) c.hdr.flags |= flag_nonfinite;
  c.hdr.payload_bytes = l.total;
  return {};
}

inline status randomk_encode(const detail::encode_call& c) {
  return randomk_run(c, {c.in.data, c.in.type}, {});
}
inline status randomk_encode_feedback(const detail::feedback_call& f) {
  return randomk_run(f.enc, {f.enc.in.data, f.enc.in.type, f.residual.data, f.residual.type},
                     f.residual);
}

inline status randomk_decode(const detail::decode_call& c) {
  const std::uint64_t n = c.hdr.n, k = c.hdr.count;
  if (n > 0 && k == 0) return corrupt("randomk frame with no elements");
  const dtype wire = c.hdr.type;
  const std::uint64_t vsize = dtype_size(wire), osize = dtype_size(c.out.type);
  const blocks::randomk_layout l = blocks::randomk_layout_of(k, vsize);
  std::uint32_t key[4];
  std::memcpy(key, c.payload + l.key_offset, 16);
  blocks::counter_rng rng{};
  rng.key.k0 = key[0];
  rng.key.k1 = key[1];
  rng.step_lo = key[2];
  rng.tensor_lo = key[3];
  const std::byte* values = c.payload + l.values_offset;
  auto* out = static_cast<std::byte*>(c.out.data);
  const philox16_gen g = philox16_make(rng, blocks::rng_stream::selection);
  const std::uint64_t per = randomk_task_strata(n, k, !c.accumulate);
  const std::uint64_t tasks = blocks::ceil_div(k, per);
  auto touch = [&](std::uint64_t i) {  // into L2, as in randomk_run (see strata_ahead)
    if (c.accumulate) prefetch_element<1>(c.out.data, c.out.type, i);
  };
  parallel_for(threads_for(c.threads, tasks), tasks, [&](std::uint64_t t) {
    const std::uint64_t j0 = t * per, j1 = std::min(k, j0 + per);
    std::uint64_t j = j0;
    randomk_strata(g, n, k, j0, j1, touch, [&](const strata_batch& bt) {
      if (!c.accumulate) std::memset(out + bt.first * osize, 0, (bt.end - bt.first) * osize);
      for (unsigned q = 0; q < bt.count; ++q, ++j) {
        const float x = get_value(values + j * vsize, wire);
        const std::uint64_t i = bt.index[q];
        store_value(
            c.out.data, c.out.type, i,
            canonical_nan(c.accumulate ? std::fma(c.alpha, x, load_value(c.out.data, c.out.type, i))
                                       : x));
      }
    });
  });
  return {};
}

// This family's row of the variant's table (cpu/ops-inl.hpp).
GRADCODEC_CPU_CODEC_ROW(randomk);
