// SPDX-License-Identifier: Apache-2.0
//! @file
//! Sparsification codecs that select by magnitude (docs/codecs.md "Sparsification"): topk,
//! dgc and threshold on the selection pieces of select-inl.hpp (random-k is
//! randomk-inl.hpp). Included inside an ISA namespace after cpu/family-inl.hpp.
//!
//! Error feedback (p = g + e, residual = p - decoded) is fused: with an f32 residual the
//! filter pass stores p in the residual as it reads g and e, and the compaction patches the
//! sent entries, so g and e are read once. A 16-bit residual cannot hold p exactly until the
//! selection is known (a collection pass may have to run again from p), so it is written by
//! a second pass.

#include "select-inl.hpp"

inline sparse_sink sparse_sink_of(const detail::encode_call& c, const blocks::sparse_layout& pl) {
  return {c.payload + pl.values_offset, c.payload + pl.index_offset, c.wire,
          (c.hdr.flags & flag_index64) != 0, nullptr};
}
//! Zeroes the payload's padding and fills the header fields every sparse codec sets.
inline void sparse_finish(const detail::encode_call& c, const blocks::sparse_layout& pl,
                          std::uint64_t count, bool nonfinite) {
  std::memset(c.payload + pl.values_bytes, 0, pl.index_offset - pl.values_bytes);
  std::memset(c.payload + pl.index_offset + pl.index_bytes, 0,
              pl.total - pl.index_offset - pl.index_bytes);
  c.hdr.payload_bytes = pl.total;
  c.hdr.count = count;
  if (nonfinite) c.hdr.flags |= flag_nonfinite;
}

//! The f32 residual that holds p after a StoreP filter pass, as a source.
inline psource residual_source(tensor_view res) { return {res.data, dtype::f32}; }

//! Output offsets when task t writes gt[t] entries of its own (plus take[t], already set).
inline void sparse_offsets(const sel_space& s) {
  std::uint64_t at = 0;
  for (std::uint64_t t = 0; t < s.tasks; ++t) {
    s.off[t] = at;
    at += s.gt[t] + s.take[t];
  }
}

//! The collection pass of a top-k selection: candidates at `collect`, extra[] counting
//! key >= extra_at when `extra`; with an f32 residual it also stores p there (see the file
//! comment). Returns whether any value was non-finite.
inline bool sparse_collect(const sel_space& s, const psource& src, std::uint32_t collect,
                           bool extra, std::uint32_t extra_at, tensor_view res) {
  if (res.data != nullptr && res.type == dtype::f32) {
    auto* pf = static_cast<float*>(res.data);
    return extra ? sel_filter<true, true, true>(s, src, collect, extra_at, pf)
                 : sel_filter<true, false, true>(s, src, collect, extra_at, pf);
  }
  return extra ? sel_filter<true, true, false>(s, src, collect, extra_at, nullptr)
               : sel_filter<true, false, false>(s, src, collect, extra_at, nullptr);
}

//! After sparse_collect: writes the top k, collecting again at `floor` first when fewer than
//! k candidates were collected (everything at `floor` must reach k).
inline void sparse_top_finish(const sel_space& s, const psource& src, std::uint64_t k,
                              std::uint32_t floor, sparse_sink sink, tensor_view res) {
  const bool ef = res.data != nullptr, store_p = ef && res.type == dtype::f32;
  if (sel_sum(s.cnt, s.tasks) < k)
    sel_filter<true, false, false>(s, store_p ? residual_source(res) : src, floor, 0, nullptr);
  sink.patch = store_p ? static_cast<float*>(res.data) : nullptr;
  sel_emit_top(s, k, sink);
  if (ef && !store_p) sel_residual(s, src, sink, res);
}

//! Every element sent, in index order (k == n): one pass.
inline bool sparse_all(const sel_space& s, const psource& src, const sparse_sink& sink,
                       tensor_view res) {
  for (std::uint64_t t = 0; t < s.tasks; ++t) {
    s.gt[t] = s.end(t) - s.begin(t);
    s.take[t] = 0;
  }
  sparse_offsets(s);
  return res.data ? sel_emit_direct<false, true>(s, src, 0, sink, res)
                  : sel_emit_direct<false, false>(s, src, 0, sink, res);
}

// ---- topk ---------------------------------------------------------------------------

inline std::size_t topk_workspace(const codec_spec& spec, const_tensor_view shape, operation op) {
  if (op != operation::encode && op != operation::encode_with_feedback) return 0;
  const std::uint64_t n = shape.n;
  return sel_layout_of(n, sparse_count(spec, n) < n, topk_sample_size(n)).total;
}

//! A key that about k' > k elements reach, k' - k a few standard deviations of the sample
//! estimate; 0 (everything) for small inputs. Only speed depends on it.
inline std::uint32_t topk_guess(const sel_space& s, const psource& src, std::uint64_t k,
                                std::uint32_t* keys) {
  const std::uint64_t n = s.n, m = topk_sample_size(n);
  if (m == 0) return 0;
  const double expect = static_cast<double>(m) * static_cast<double>(k) / static_cast<double>(n);
  const double rank = std::ceil(expect + 4.0 * std::sqrt(expect) + 4.0);
  if (rank >= static_cast<double>(m)) return 0;
  for (std::uint64_t j = 0; j < m; ++j)
    keys[j] = sel_key(blocks::float_bits(src.load1(topk_sample_position(j, m, n))));
  return radix_select(s, 1, static_cast<std::uint64_t>(rank),
                      [&](std::uint64_t, const auto& fn) { fn(keys, m); })
      .key;
}

inline status topk_run(const detail::encode_call& c, const psource& src, tensor_view res) {
  const std::uint64_t n = c.in.n, k = sparse_count(c.spec, n);
  const blocks::sparse_layout pl =
      blocks::sparse_layout_of(k, dtype_size(c.wire), (c.hdr.flags & flag_index64) != 0);
  if (pl.total > c.capacity) return too_small();
  const sel_layout l = sel_layout_of(n, k < n, topk_sample_size(n));
  const sel_space s = sel_space_of(l, c.workspace.data(), n, c.threads);
  const sparse_sink sink = sparse_sink_of(c, pl);
  bool nonfinite = false;
  if (k == n) {
    nonfinite = sparse_all(s, src, sink, res);
  } else {
    const std::uint32_t guess = topk_guess(s, src, k, s.sample);
    nonfinite = sparse_collect(s, src, guess, false, 0, res);
    sparse_top_finish(s, src, k, 0, sink, res);
  }
  sparse_finish(c, pl, k, nonfinite);
  return {};
}

inline status topk_encode(const detail::encode_call& c) {
  return topk_run(c, {c.in.data, c.in.type}, {});
}
inline status topk_encode_feedback(const detail::feedback_call& f) {
  return topk_run(f.enc, {f.enc.in.data, f.enc.in.type, f.residual.data, f.residual.type},
                  f.residual);
}

// ---- Sparse decode (topk, dgc, threshold) -----------------------------------------------

inline status sparse_decode(const detail::decode_call& c) {
  const std::uint64_t n = c.hdr.n, k = c.hdr.count;
  const bool index64 = (c.hdr.flags & flag_index64) != 0;
  const dtype wire = c.hdr.type;
  const std::uint64_t vsize = dtype_size(wire);
  const blocks::sparse_layout pl = blocks::sparse_layout_of(k, vsize, index64);
  const std::byte* values = c.payload + pl.values_offset;
  const std::byte* index = c.payload + pl.index_offset;
  auto index_at = [&](std::uint64_t j) -> std::uint64_t {
    if (index64) {
      std::uint64_t v;
      std::memcpy(&v, index + j * 8, 8);
      return v;
    }
    std::uint32_t v;
    std::memcpy(&v, index + j * 4, 4);
    return v;
  };

  // Every index below n and strictly above the previous one, before anything is written.
  const std::uint64_t vt = blocks::ceil_div(k, sel_grain);
  std::atomic<bool> out_of_range{false}, unordered{false};
  parallel_for(threads_for(c.threads, vt), vt, [&](std::uint64_t t) {
    const std::uint64_t j0 = t * sel_grain, j1 = std::min(k, j0 + sel_grain);
    bool range_ok = true, order_ok = true;
    std::uint64_t j = j0;
    if (!index64) {
      const vu16 nv = vset1u(static_cast<std::uint32_t>(n));  // n < 2^32 without index64
      if (j == 0 && j < j1) {
        range_ok = index_at(0) < n;
        j = 1;
      }
      for (; j + 16 <= j1; j += 16) {
        std::uint32_t cur[16], prev[16];
        std::memcpy(cur, index + j * 4, 64);
        std::memcpy(prev, index + (j - 1) * 4, 64);
        const vu16 a = vload_u(cur);
        range_ok &= vltu(a, nv) == 0xFFFF;
        order_ok &= vltu(vload_u(prev), a) == 0xFFFF;
      }
    }
    for (; j < j1; ++j) {
      const std::uint64_t i = index_at(j);
      range_ok &= i < n;
      order_ok &= j == 0 || index_at(j - 1) < i;
    }
    if (!range_ok) out_of_range.store(true, std::memory_order_relaxed);
    if (!order_ok) unordered.store(true, std::memory_order_relaxed);
  });
  if (out_of_range.load()) return corrupt("sparse index out of range");
  if (unordered.load()) return corrupt("sparse indices not strictly ascending");

  const std::uint64_t osize = dtype_size(c.out.type);
  auto* out = static_cast<std::byte*>(c.out.data);
  if (c.accumulate) {
    // Scatter-add: distinct indices, so tasks over entry ranges never touch the same element.
    const std::uint64_t tasks = blocks::ceil_div(k, std::uint64_t{1} << 14);
    parallel_for(threads_for(c.threads, tasks), tasks, [&](std::uint64_t t) {
      const std::uint64_t j1 = std::min(k, (t + 1) << 14);
      for (std::uint64_t j = t << 14; j < j1; ++j) {
        if (j + 64 < j1) __builtin_prefetch(out + index_at(j + 64) * osize, 1);
        const std::uint64_t i = index_at(j);
        const float x = get_value(values + j * vsize, wire);
        store_value(c.out.data, c.out.type, i,
                    canonical_nan(std::fma(c.alpha, x, load_value(c.out.data, c.out.type, i))));
      }
    });
    return {};
  }
  // Zero fill and scatter, one block at a time, so that the block stays in L1 between the
  // two; a large output is written staged (cpu/kernels/staged-inl.hpp).
  const bool staged = staged_output(n, osize);
  const std::uint64_t tasks = blocks::ceil_div(n, sel_grain);
  parallel_for(threads_for(c.threads, tasks), tasks, [&](std::uint64_t t) {
    const std::uint64_t b = t * sel_grain, e = std::min(n, b + sel_grain);
    std::uint64_t lo = 0, hi = k;  // first entry with index >= b
    while (lo < hi) {
      const std::uint64_t mid = lo + (hi - lo) / 2;
      if (index_at(mid) < b)
        lo = mid + 1;
      else
        hi = mid;
    }
    std::uint64_t j = lo;
    write_staged(out, osize, b, e, staged, [&](std::byte* dst, std::uint64_t sb, std::uint64_t se) {
      std::memset(dst, 0, (se - sb) * osize);
      for (std::uint64_t i; j < k && (i = index_at(j)) < se; ++j)
        store_value(dst, c.out.type, i - sb, canonical_nan(get_value(values + j * vsize, wire)));
    });
  });
  return {};
}

inline status topk_decode(const detail::decode_call& c) {
  // An encoder always sends k >= 1 of n >= 1 elements.
  if (c.hdr.n > 0 && c.hdr.count == 0) return corrupt("topk frame with no elements");
  return sparse_decode(c);
}

// ---- dgc ----------------------------------------------------------------------------

//! s = min(max(1, ceil(sample * n)), n), in double.
inline std::uint64_t dgc_sample_size(double sample, std::uint64_t n) {
  const double s = std::ceil(sample * static_cast<double>(n));
  return std::min(std::max<std::uint64_t>(1, static_cast<std::uint64_t>(s)), n);
}

inline std::size_t dgc_workspace(const codec_spec& spec, const_tensor_view shape, operation op) {
  if (op != operation::encode && op != operation::encode_with_feedback) return 0;
  const std::uint64_t n = shape.n;
  return sel_layout_of(n, true, n == 0 ? 0 : dgc_sample_size(spec.sample, n) + topk_sample_size(n))
      .total;
}

inline status dgc_run(const detail::encode_call& c, const psource& src, tensor_view res) {
  const std::uint64_t n = c.in.n, k = sparse_count(c.spec, n);
  const blocks::sparse_layout pl =
      blocks::sparse_layout_of(k, dtype_size(c.wire), (c.hdr.flags & flag_index64) != 0);
  if (pl.total > c.capacity) return too_small();
  c.hdr.param = static_cast<float>(c.spec.sample);
  if (n == 0) {
    sparse_finish(c, pl, 0, false);
    return {};
  }
  const std::uint64_t m = dgc_sample_size(c.spec.sample, n), stride = n / m;
  const sel_layout l = sel_layout_of(n, true, m + topk_sample_size(n));
  const sel_space s = sel_space_of(l, c.workspace.data(), n, c.threads);
  const sparse_sink sink = sparse_sink_of(c, pl);

  // The strided sample's keys (non-finite values count 0: they must not raise the threshold).
  const auto rng = blocks::counter_rng::make(c.ctx.seed, c.ctx.step, c.ctx.tensor_id);
  const std::uint64_t start = blocks::scale_u32(rng.at(blocks::rng_stream::sampling, 0), stride);
  const std::uint64_t parts = blocks::ceil_div(m, sel_grain);
  sel_run(s, parts, [&](std::uint64_t p) {
    for (std::uint64_t j = p * sel_grain; j < std::min(m, (p + 1) * sel_grain); ++j) {
      const std::uint32_t key = sel_key(blocks::float_bits(src.load1(start + j * stride)));
      s.sample[j] = key > sel_max_finite_key ? 0u : key;
    }
  });
  auto sample_rank = [&](std::uint64_t rank) {
    return radix_select(s, parts, rank,
                        [&](std::uint64_t p, const auto& fn) {
                          fn(s.sample + p * sel_grain, std::min(sel_grain, m - p * sel_grain));
                        })
        .key;
  };
  const auto ks_exact = (static_cast<u128>(k) * m + (n - 1)) / n;  // ceil(k * s / n)
  const std::uint64_t ks = std::max<std::uint64_t>(1, static_cast<std::uint64_t>(ks_exact));
  // Rounds 1-3 halve the threshold; only the last one decides between exact top-k (some
  // round reaches k candidates) and the fill-in fallback, since counts only grow.
  float t = blocks::bits_float(sample_rank(ks));
  for (int round = 1; round < 4; ++round) t = t * 0.5f;
  const std::uint32_t last = blocks::float_bits(t);
  // Collect at the top-k guess (speed only), never below the last round's threshold.
  const std::uint32_t collect = std::max(topk_guess(s, src, k, s.sample + m), last);

  const bool nonfinite = sparse_collect(s, src, collect, true, last, res);
  const std::uint64_t candidates = sel_sum(s.extra, s.tasks);
  if (candidates >= k) {
    sparse_top_finish(s, src, k, last, sink, res);
  } else {
    // Fallback: every candidate plus the lowest-index other elements, k in all.
    std::uint64_t fill = k - candidates;
    for (std::uint64_t t2 = 0; t2 < s.tasks; ++t2) {
      s.gt[t2] = s.extra[t2];
      s.take[t2] = std::min(fill, s.end(t2) - s.begin(t2) - s.extra[t2]);
      fill -= s.take[t2];
    }
    sparse_offsets(s);
    const bool store_p = res.data != nullptr && res.type == dtype::f32;
    const psource again = store_p ? residual_source(res) : src;
    if (res.data)
      sel_emit_direct<true, true>(s, again, last, sink, res);
    else
      sel_emit_direct<true, false>(s, again, last, sink, res);
  }
  sparse_finish(c, pl, k, nonfinite);
  return {};
}

inline status dgc_encode(const detail::encode_call& c) {
  return dgc_run(c, {c.in.data, c.in.type}, {});
}
inline status dgc_encode_feedback(const detail::feedback_call& f) {
  return dgc_run(f.enc, {f.enc.in.data, f.enc.in.type, f.residual.data, f.residual.type},
                 f.residual);
}
inline status dgc_decode(const detail::decode_call& c) {
  if (c.hdr.n > 0 && c.hdr.count == 0) return corrupt("dgc frame with no elements");
  return sparse_decode(c);
}

// ---- threshold ----------------------------------------------------------------------

//! Candidate slots per task of an uncapped threshold: 1/32 of a task (densities up to 3 %,
//! where thresholds are used), so the workspace is about a quarter byte per element; a
//! denser task is read a second time instead.
inline constexpr std::uint64_t threshold_slots = sel_grain / 32;
//! Elements the error-feedback threshold prefetches ahead of itself, into L2 (1024 and 2048
//! measured alike, 4096 slower).
inline constexpr std::uint64_t threshold_prefetch_ahead = 1024;

inline bool threshold_capped(const codec_spec& spec, std::uint64_t n) {
  return spec.cap > 0 && spec.cap < n;
}

inline std::size_t threshold_workspace(const codec_spec& spec, const_tensor_view shape,
                                       operation op) {
  if (op != operation::encode && op != operation::encode_with_feedback) return 0;
  const bool capped = threshold_capped(spec, shape.n);
  return sel_layout_of(shape.n, true, 0, capped ? sel_grain : threshold_slots).total;
}

//! Error feedback of an uncapped threshold whose buffer holds a frame of every element
//! (encode_bound's size): one pass over g and e at any density, residual included.
//!
//! Chunk c, a run of consecutive tasks on one thread, writes its entries as if every element
//! before it had been sent (values from entry begin(c), indices from entry begin(c) of an
//! n-entry frame); then each chunk's entries move down to their final places, values
//! first, in index order: every move goes down and lands on no chunk not yet moved. Each
//! task compacts its candidates into its workspace region (in L1) and copies the region out
//! whenever it fills; compacting straight into the frame measured several times slower.
//!
//! Before, a task with more candidates than its region (3 % of it) read p a second time,
//! and the residual's accumulation makes that the usual case (docs/performance.md). A plain
//! encode, at the density tau was chosen for, keeps the collect-then-emit path, which
//! measured faster there. Returns the entry count; nonfinite: whether a value was not finite.
inline std::uint64_t threshold_feedback_one_pass(const detail::encode_call& c, const sel_space& s,
                                                 const psource& source, std::uint32_t at,
                                                 tensor_view res, bool& nonfinite) {
  const std::size_t vsize = dtype_size(c.wire);
  const bool index64 = (c.hdr.flags & flag_index64) != 0;
  const std::size_t isize = index64 ? 8 : 4;
  const blocks::sparse_layout full = blocks::sparse_layout_of(s.n, vsize, index64);
  const sparse_sink sink{c.payload, c.payload + full.index_offset, c.wire, index64, nullptr};
  const std::uint64_t chunks = static_cast<std::uint64_t>(threads_for(s.threads, s.tasks));
  const auto first_task = [&](std::uint64_t ch) { return ch * s.tasks / chunks; };
  std::atomic<bool> bad{false};
  visit_source(source, [&](const auto& src) {
    parallel_for(static_cast<int>(chunks), chunks, [&](std::uint64_t ch) {
      std::uint64_t pos = s.begin(first_task(ch));
      const vu16 finite_max = vset1u(sel_max_finite_key), atm1 = vset1u(at - 1u);
      const vu16 sixteen = vset1u(16);
      unsigned bad_lanes = 0;
      for (std::uint64_t t = first_task(ch); t < first_task(ch + 1); ++t) {
        const std::uint64_t b = s.begin(t), e = s.end(t), first = pos;
        std::uint32_t* vals = s.vals + t * s.region;
        std::uint32_t* offs = s.offs + t * s.region;
        std::uint64_t held = 0;
        // The region's entries to the frame; pos <= the next element, so every whole-vector
        // store stays inside this chunk's part of the frame.
        const auto flush = [&] {
          pos = sink_put_all(sink, pos, e, vals, offs, held, b);
          held = 0;
        };
        vu16 off = viota();
        const auto one = [&](std::uint64_t i, vf16 p, mask16 valid, unsigned r) GRADCODEC_VLAMBDA {
          const vu16 key = vsel_key(vbits(p));
          bad_lanes |= mask_and(vgti(key, finite_max), valid);
          const mask16 sel = mask_and(vgti(key, atm1), valid);
          const vf16 rv = vselect(sel, p - vwire_roundtrip(p, c.wire), p);
          if (r == 16)
            vstore_any(res.data, res.type, i, rv);
          else
            vstore_any_n(res.data, res.type, i, rv, r);
          vcompress_store(vals + held, sel, vbits(p));
          held += vcompress_store(offs + held, sel, off);
          off = off + sixteen;
          if (held > s.region - 16) flush();
        };
        std::uint64_t i = b;
        for (; i + 16 <= e; i += 16) {
          src.prefetch(i + threshold_prefetch_ahead);
          one(i, src.load(i), 0xFFFF, 16);
        }
        if (i < e) {
          const unsigned r = static_cast<unsigned>(e - i);
          one(i, src.load_n(i, r), lanes_below(r), r);
        }
        flush();
        s.cnt[t] = pos - first;
      }
      if (bad_lanes) bad.store(true, std::memory_order_relaxed);
    });
  });
  nonfinite = bad.load();
  std::uint64_t m = 0;
  for (std::uint64_t t = 0; t < s.tasks; ++t) m += s.cnt[t];
  const std::uint64_t final_index = blocks::sparse_layout_of(m, vsize, index64).index_offset;
  for (const bool values : {true, false}) {
    std::uint64_t to = 0;
    for (std::uint64_t ch = 0; ch < chunks; ++ch) {
      const std::uint64_t from = s.begin(first_task(ch));
      std::uint64_t count = 0;
      for (std::uint64_t t = first_task(ch); t < first_task(ch + 1); ++t) count += s.cnt[t];
      if (values)
        std::memmove(c.payload + to * vsize, c.payload + from * vsize, count * vsize);
      else
        std::memmove(c.payload + final_index + to * isize,
                     c.payload + full.index_offset + from * isize, count * isize);
      to += count;
    }
  }
  return m;
}

inline status threshold_run(const detail::encode_call& c, const psource& src, tensor_view res) {
  const std::uint64_t n = c.in.n, cap = c.spec.cap;
  const float tau = c.spec.tau;
  // |v| >= tau or non-finite  <=>  key >= the bits of |tau| (tau is finite, maybe -0.0).
  const std::uint32_t at = blocks::float_bits(tau) & 0x7FFFFFFFu;
  const bool may_cap = threshold_capped(c.spec, n);
  const sel_layout l = sel_layout_of(n, true, 0, may_cap ? sel_grain : threshold_slots);
  const sel_space s = sel_space_of(l, c.workspace.data(), n, c.threads);
  const std::size_t vsize = dtype_size(c.wire);
  const bool index64 = (c.hdr.flags & flag_index64) != 0;
  c.hdr.param = tau;
  if (res.data && !may_cap && blocks::sparse_layout_of(n, vsize, index64).total <= c.capacity) {
    bool nonfinite = false;
    const std::uint64_t m = threshold_feedback_one_pass(c, s, src, at, res, nonfinite);
    sparse_finish(c, blocks::sparse_layout_of(m, vsize, index64), m, nonfinite);
    return {};
  }
  // A plain encode, a cap, or a buffer too small for every element. One pass collects the
  // candidates; with an f32 residual it also stores p there (see the file comment), but
  // only when the buffer holds a frame of every element: the frame size is known after the
  // pass, and a refused call must leave the residual untouched.
  const bool store_p = res.data != nullptr && res.type == dtype::f32 &&
                       blocks::sparse_layout_of(n, vsize, index64).total <= c.capacity;
  const bool nonfinite = sparse_collect(s, src, at, false, 0, store_p ? res : tensor_view{});
  const std::uint64_t kept_all = sel_sum(s.cnt, s.tasks);
  const bool capped = may_cap && kept_all > cap;
  const std::uint64_t m = capped ? cap : kept_all;
  const blocks::sparse_layout pl = blocks::sparse_layout_of(m, vsize, index64);
  if (pl.total > c.capacity) return too_small();
  sparse_sink sink = sparse_sink_of(c, pl);
  if (capped) {
    sparse_top_finish(s, src, m, at, sink, store_p ? res : tensor_view{});
    if (res.data && !store_p) sel_residual(s, src, sink, res);
  } else {
    for (std::uint64_t t = 0; t < s.tasks; ++t) {
      s.gt[t] = s.cnt[t];
      s.take[t] = 0;
    }
    sparse_offsets(s);
    // With p in the residual, the sink patches the residual at every entry it writes.
    sink.patch = store_p ? static_cast<float*>(res.data) : nullptr;
    sel_emit_collected(s, store_p ? residual_source(res) : src, at, sink);
    if (res.data && !store_p) sel_residual(s, src, sink, res);
  }
  sparse_finish(c, pl, m, nonfinite);
  return {};
}

inline status threshold_encode(const detail::encode_call& c) {
  return threshold_run(c, {c.in.data, c.in.type}, {});
}
inline status threshold_encode_feedback(const detail::feedback_call& f) {
  return threshold_run(f.enc, {f.enc.in.data, f.enc.in.type, f.residual.data, f.residual.type},
                       f.residual);
}
inline status threshold_decode(const detail::decode_call& c) { return sparse_decode(c); }

// This family's rows of the variant's table (cpu/ops-inl.hpp).
GRADCODEC_CPU_CODEC_ROW(topk);
GRADCODEC_CPU_CODEC_ROW(dgc);
GRADCODEC_CPU_CODEC_ROW(threshold);
