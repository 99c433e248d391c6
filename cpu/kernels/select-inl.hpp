// SPDX-License-Identifier: Apache-2.0
//! @file
//! Exact selection for the index + value codecs (topk, dgc, threshold; docs/codecs.md
//! "Sparsification"): the selection key, a filter pass that collects candidates, radix
//! select over candidate keys, and the ordered compaction that writes a sparse payload.
//! Included inside an ISA namespace (see cpu/table-inl.hpp) after simd-inl.hpp.
//!
//! Data is cut into tasks of sel_grain elements. Every per-task result (candidates,
//! counts, output offsets) depends only on the task index, and integer histograms are summed
//! in any order, so the bytes never depend on the thread count.

inline constexpr std::uint64_t sel_grain = std::uint64_t{1} << 16;
//! key(v): the bits of |v|, every NaN mapped to one value above +Inf. Keys stay below 2^31,
//! so signed lane compares order them correctly.
inline constexpr std::uint32_t sel_nan_key = 0x7F800001u;
inline constexpr std::uint32_t sel_max_finite_key = 0x7F7FFFFFu;

inline std::uint32_t sel_key(std::uint32_t bits) {
  const std::uint32_t a = bits & 0x7FFFFFFFu;
  return a < sel_nan_key ? a : sel_nan_key;
}
inline vu16 vsel_key(vu16 bits) { return vminu(bits & vset1u(0x7FFFFFFFu), vset1u(sel_nan_key)); }
//! key >= t as key > t - 1 (t = 0 wraps to -1, below every key).
inline mask16 vkey_ge(vu16 key, std::uint32_t t) { return vgti(key, vset1u(t - 1u)); }
inline mask16 mask_and(mask16 a, mask16 b) { return static_cast<mask16>(a & b); }
inline mask16 lanes_below(unsigned r) { return static_cast<mask16>((1u << r) - 1u); }
inline vu16 viota() {
  const std::uint32_t v[16] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
  return vload_u(v);
}
//! The r lowest set bits of m.
inline mask16 keep_lowest(mask16 m, std::uint64_t r) {
  if (vpopcount(m) <= r) return m;
  unsigned rest = m, out = 0;
  for (; r > 0; --r) {
    out |= rest & (~rest + 1u);
    rest &= rest - 1u;
  }
  return static_cast<mask16>(out);
}

// ---- Element access -----------------------------------------------------------------

//! What a decoder reads back for p sent in the wire dtype.
inline vf16 vwire_roundtrip(vf16 p, dtype wire) {
  if (wire == dtype::f32) return p;
  std::uint16_t h[16];
  if (wire == dtype::f16) {
    vstore_f16(h, p);
    return vload_f16(h);
  }
  vstore_bf16(h, p);
  return vload_bf16(h);
}
inline float wire_roundtrip(float p, dtype wire) {
  if (wire == dtype::f16) return blocks::f16_to_f32(blocks::f32_to_f16(p));
  if (wire == dtype::bf16) return blocks::bf16_to_f32(blocks::f32_to_bf16(p));
  return p;
}

//! The values a codec encodes: the input, or p = g + e (f32) under error feedback. Dtypes
//! known at run time; visit_source hands the hot loops a compile-time typed equivalent.
struct psource {
  const void* g;
  dtype tg;
  const void* e = nullptr;
  dtype te = dtype::f32;

  vf16 load(std::uint64_t i) const {
    const vf16 v = vload_any(g, tg, i);
    return e ? vadd_nan_first(v, vload_any(e, te, i)) : v;
  }
  vf16 load_n(std::uint64_t i, unsigned r) const {
    const vf16 v = vload_any_n(g, tg, i, r);
    return e ? vadd_nan_first(v, vload_any_n(e, te, i, r)) : v;
  }
  float load1(std::uint64_t i) const {
    const float v = load_value(g, tg, i);
    return e ? blocks::fadd_nan_first(v, load_value(e, te, i)) : v;
  }
  //! Into L2, as the other streaming kernels do (docs/performance.md).
  void prefetch(std::uint64_t i) const {
    prefetch_element<1>(g, tg, i);
    if (e) prefetch_element<1>(e, te, i);
  }
};

template <dtype T>
inline vf16 tload(const void* p, std::uint64_t i) {
  if constexpr (T == dtype::f32)
    return vload(static_cast<const float*>(p) + i);
  else if constexpr (T == dtype::f16)
    return vload_f16(static_cast<const std::uint16_t*>(p) + i);
  else
    return vload_bf16(static_cast<const std::uint16_t*>(p) + i);
}

//! psource with its dtypes fixed at compile time (no per-vector dispatch in hot loops).
template <dtype G, bool HasE, dtype E>
struct typed_source {
  const void* g;
  const void* e;

  vf16 load(std::uint64_t i) const {
    if constexpr (HasE)
      return vadd_nan_first(tload<G>(g, i), tload<E>(e, i));
    else
      return tload<G>(g, i);
  }
  vf16 load_n(std::uint64_t i, unsigned r) const {
    const vf16 v = vload_any_n(g, G, i, r);
    if constexpr (HasE)
      return vadd_nan_first(v, vload_any_n(e, E, i, r));
    else
      return v;
  }
  float load1(std::uint64_t i) const {
    if constexpr (HasE)
      return blocks::fadd_nan_first(load_value(g, G, i), load_value(e, E, i));
    else
      return load_value(g, G, i);
  }
  void prefetch(std::uint64_t i) const {
    prefetch_element<1>(g, G, i);
    if constexpr (HasE) prefetch_element<1>(e, E, i);
  }
};

//! Calls f with a typed source for the common cases (plain input of any dtype, f32 g + f32
//! e) and with the runtime-typed psource for the other error-feedback dtype pairs.
template <class F>
inline void visit_source(const psource& s, const F& f) {
  if (s.e == nullptr) {
    switch (s.tg) {
      case dtype::f16: return f(typed_source<dtype::f16, false, dtype::f32>{s.g, nullptr});
      case dtype::bf16: return f(typed_source<dtype::bf16, false, dtype::f32>{s.g, nullptr});
      case dtype::f32: return f(typed_source<dtype::f32, false, dtype::f32>{s.g, nullptr});
    }
  }
  if (s.tg == dtype::f32 && s.te == dtype::f32)
    return f(typed_source<dtype::f32, true, dtype::f32>{s.g, s.e});
  f(s);
}

// ---- Workspace ----------------------------------------------------------------------

//! Byte offsets in the workspace: candidate regions (per task: value bits and offsets from
//! the task start, `slots` + 16 entries so whole-vector compress stores never spill), six
//! per-task counters, one shared histogram, and sample keys. Regions hold every candidate
//! of a task by default (slots = task length); fewer slots bound the workspace, and a task
//! with more candidates is marked incomplete (sel_space::complete) for its caller to
//! handle.
struct sel_layout {
  std::uint64_t tasks = 0, region = 0;
  std::size_t vals = 0, offs = 0, counts = 0, hist = 0, sample = 0, total = 0;
};
inline sel_layout sel_layout_of(std::uint64_t n, bool candidates, std::uint64_t sample_keys,
                                std::uint64_t slots = sel_grain) {
  sel_layout l;
  l.tasks = blocks::ceil_div(n, sel_grain);
  l.region = std::min({n, sel_grain, slots}) + 16;
  auto take = [&](std::uint64_t bytes) {
    const std::size_t at = l.total;
    l.total += static_cast<std::size_t>((bytes + 63) / 64 * 64);
    return at;
  };
  if (candidates) {
    l.vals = take(l.tasks * l.region * 4);
    l.offs = take(l.tasks * l.region * 4);
  }
  l.counts = take(l.tasks * 6 * 8);
  l.hist = take(2048 * 8);
  l.sample = take(sample_keys * 4);
  return l;
}

struct sel_space {
  std::uint64_t n = 0, tasks = 0, region = 0;
  int threads = 1;
  std::uint32_t* vals = nullptr;  //!< candidate f32 bits, region t at t * region
  std::uint32_t* offs = nullptr;  //!< candidate offsets from the task's first element
  std::uint64_t *cnt, *extra, *gt, *take, *off, *aux;
  std::uint64_t* hist;
  std::uint32_t* sample;

  std::uint64_t begin(std::uint64_t t) const { return t * sel_grain; }
  std::uint64_t end(std::uint64_t t) const { return std::min(n, (t + 1) * sel_grain); }
  //! Entries task t writes: candidates kept outright (gt) plus its share of ties or fill.
  std::uint64_t out_end(std::uint64_t t) const { return off[t] + gt[t] + take[t]; }
  //! Whether a collecting filter pass stored all cnt[t] candidates of task t (a region
  //! stops taking candidates once it holds more than region - 16).
  bool complete(std::uint64_t t) const { return cnt[t] <= region - 16; }
};
inline sel_space sel_space_of(const sel_layout& l, std::byte* ws, std::uint64_t n, int threads) {
  sel_space s;
  s.n = n;
  s.tasks = l.tasks;
  s.region = l.region;
  s.threads = threads;
  if (l.vals != l.offs) {
    s.vals = reinterpret_cast<std::uint32_t*>(ws + l.vals);
    s.offs = reinterpret_cast<std::uint32_t*>(ws + l.offs);
  }
  auto* c = reinterpret_cast<std::uint64_t*>(ws + l.counts);
  s.cnt = c;
  s.extra = c + l.tasks;
  s.gt = c + 2 * l.tasks;
  s.take = c + 3 * l.tasks;
  s.off = c + 4 * l.tasks;
  s.aux = c + 5 * l.tasks;
  s.hist = reinterpret_cast<std::uint64_t*>(ws + l.hist);
  s.sample = reinterpret_cast<std::uint32_t*>(ws + l.sample);
  return s;
}
inline void sel_run(const sel_space& s, std::uint64_t tasks, task_ref body) {
  parallel_for(threads_for(s.threads, tasks), tasks, body);
}

// ---- Filter pass ----------------------------------------------------------------------

//! One pass over the data. Task t counts key >= collect in cnt[t] (and, when Collect, stores
//! those candidates in region t in index order while it has room: see complete()), and
//! counts key >= count_at in extra[t] when Extra. StoreP writes p to an f32 array. Returns
//! whether any value was non-finite.
template <bool Collect, bool Extra, bool StoreP>
inline bool sel_filter(const sel_space& s, const psource& source, std::uint32_t collect,
                       std::uint32_t count_at, float* store_p) {
  std::atomic<bool> bad{false};
  visit_source(source, [&](const auto& src) {
    sel_run(s, s.tasks, [&](std::uint64_t t) {
      const std::uint64_t b = s.begin(t), e = s.end(t);
      std::uint32_t* vals = Collect ? s.vals + t * s.region : nullptr;
      std::uint32_t* offs = Collect ? s.offs + t * s.region : nullptr;
      const vu16 lc = vset1u(collect - 1u), lx = vset1u(count_at - 1u);
      const vu16 finite_max = vset1u(sel_max_finite_key);
      std::uint64_t cnt = 0, ext = 0;
      unsigned nonfinite = 0;
      // Masks of one vector: candidates returned, the counters updated.
      auto scan = [&](vf16 p, mask16 valid) GRADCODEC_VLAMBDA {
        const vu16 key = vsel_key(vbits(p));
        nonfinite |= mask_and(vgti(key, finite_max), valid);
        if (Extra) ext += vpopcount(mask_and(vgti(key, lx), valid));
        return mask_and(vgti(key, lc), valid);
      };
      // Every vector is compacted, selected lanes or not: a branch on the rare candidate
      // vectors mispredicts more than the compress costs.
      vu16 off = viota();
      const vu16 sixteen = vset1u(16);
      const std::uint64_t room = s.region - 16;
      auto one = [&](vf16 p, mask16 valid) GRADCODEC_VLAMBDA {
        const mask16 m = scan(p, valid);
        if (Collect && cnt <= room) {
          vcompress_store(vals + cnt, m, vbits(p));
          cnt += vcompress_store(offs + cnt, m, off);
        } else {
          cnt += vpopcount(m);
        }
        off = off + sixteen;
      };
      std::uint64_t i = b;
      for (; i + 16 <= e; i += 16) {
        const vf16 p = src.load(i);
        if (StoreP) vstore(store_p + i, p);
        one(p, 0xFFFF);
      }
      if (i < e) {
        const unsigned r = static_cast<unsigned>(e - i);
        const vf16 p = src.load_n(i, r);
        if (StoreP) vstore_n(store_p + i, p, r);
        one(p, lanes_below(r));
      }
      s.cnt[t] = cnt;
      s.extra[t] = ext;
      if (nonfinite) bad.store(true, std::memory_order_relaxed);
    });
  });
  return bad.load();
}

inline std::uint64_t sel_sum(const std::uint64_t* a, std::uint64_t tasks) {
  std::uint64_t sum = 0;
  for (std::uint64_t t = 0; t < tasks; ++t) sum += a[t];
  return sum;
}

// ---- Radix select -------------------------------------------------------------------

struct radix_pick {
  std::uint32_t key;    //!< the rank-th largest key
  std::uint64_t above;  //!< how many keys are larger
};

//! The rank-th largest key (1 <= rank <= count) over spans of f32 bits (or keys: key() is
//! idempotent). visit(p, fn) calls fn(data, count) for each span of part p. Three histogram
//! passes over digits of 11, 10 and 10 bits, each later pass only counting keys whose higher
//! digits match the ones picked so far.
template <class Visit>
inline radix_pick radix_select(const sel_space& s, std::uint64_t parts, std::uint64_t rank,
                               const Visit& visit) {
  radix_pick pick{0, 0};
  std::uint32_t prefix = 0;
  for (int d = 0; d < 3; ++d) {
    const unsigned shift = d == 0 ? 20u : d == 1 ? 10u : 0u;
    const unsigned bins = d == 0 ? 2048u : 1024u;
    std::memset(s.hist, 0, bins * sizeof(std::uint64_t));
    sel_run(s, parts, [&](std::uint64_t p) {
      // Four interleaved sub-histograms: neighbouring equal keys do not serialise on one
      // counter. u32 counters, flushed before they could overflow.
      std::uint32_t h[4][2048];
      std::memset(h, 0, sizeof h);
      std::uint64_t pending = 0;
      auto flush = [&] {
        for (unsigned b = 0; b < bins; ++b) {
          const std::uint64_t sum = std::uint64_t{h[0][b]} + h[1][b] + h[2][b] + h[3][b];
          if (sum)
            std::atomic_ref<std::uint64_t>(s.hist[b]).fetch_add(sum, std::memory_order_relaxed);
        }
        std::memset(h, 0, sizeof h);
        pending = 0;
      };
      const vu16 want = vset1u(prefix);
      const unsigned digit_mask = bins - 1u;
      visit(p, [&](const std::uint32_t* x, std::uint64_t count) {
        std::uint64_t j = 0;
        for (; j + 16 <= count; j += 16) {
          const vu16 key = vsel_key(vload_u(x + j));
          const mask16 m = d == 0 ? mask16{0xFFFF} : vequ(vshr(key, shift + 10u), want);
          if (m == 0) continue;
          std::uint32_t k[16];
          vstore_u(k, key);
          if (m == 0xFFFF) {
            for (unsigned l = 0; l < 16; ++l) ++h[l & 3u][(k[l] >> shift) & digit_mask];
          } else {
            for (unsigned r = m; r != 0; r &= r - 1u) {
              const unsigned l = static_cast<unsigned>(__builtin_ctz(r));
              ++h[l & 3u][(k[l] >> shift) & digit_mask];
            }
          }
          if ((pending += 16) >= (std::uint64_t{1} << 31)) flush();
        }
        for (; j < count; ++j) {
          const std::uint32_t k = sel_key(x[j]);
          if (d == 0 || (k >> (shift + 10u)) == prefix) ++h[j & 3u][(k >> shift) & digit_mask];
        }
      });
      flush();
    });
    std::uint64_t above = 0;
    unsigned b = bins;
    while (b-- > 0) {
      if (above + s.hist[b] >= rank) break;
      above += s.hist[b];
    }
    rank -= above;
    pick.above += above;
    prefix = (prefix << (d == 0 ? 0u : 10u)) | b;
  }
  pick.key = prefix;
  return pick;
}

//! Parts for radix select over the candidate regions: contiguous groups of tasks, a few per
//! thread (the histograms do not depend on the grouping).
struct region_parts {
  std::uint64_t parts, per;
};
inline region_parts region_parts_of(const sel_space& s) {
  const std::uint64_t want =
      std::min<std::uint64_t>(s.tasks, 4u * static_cast<unsigned>(threads_for(s.threads, s.tasks)));
  const std::uint64_t per = blocks::ceil_div(s.tasks, std::max<std::uint64_t>(1, want));
  return {blocks::ceil_div(s.tasks, per), per};
}

// ---- Ordered compaction into the sparse payload ----------------------------------------

//! Where entries go: the values (wire dtype) and indices (u32 / u64) of a sparse payload.
//! With `patch`, an f32 residual holding p also gets residual[i] = p - decoded(p) at each
//! written entry (fused error feedback).
struct sparse_sink {
  std::byte* values;
  std::byte* index;
  dtype wire;
  bool index64;
  float* patch = nullptr;
};

//! Writes the lanes `sel` of (bits, offs) as entries pos, pos + 1, ...: the wire value of the
//! f32 bits and the index base + off. The caller owns entries [pos, end), so whole-vector
//! stores that stay below `end` are safe (its later entries overwrite the spare lanes).
inline unsigned sink_put(const sparse_sink& s, std::uint64_t pos, std::uint64_t end, mask16 sel,
                         vu16 bits, vu16 offs, std::uint64_t base) {
  const bool whole = GRADCODEC_CPU_LEVEL > 0 && pos + 16 <= end;
  const vu16 index32 = offs + vset1u(static_cast<std::uint32_t>(base));
  std::uint32_t tv[16] = {}, ti[16] = {};
  unsigned c;
  if (whole && s.wire == dtype::f32) {
    c = vcompress_store(reinterpret_cast<std::uint32_t*>(s.values) + pos, sel, bits);
    if (s.patch) vcompress_store(tv, sel, bits);
  } else {
    c = vcompress_store(tv, sel, bits);
    if (s.wire == dtype::f32) {
      std::memcpy(s.values + pos * 4, tv, c * 4u);
    } else {
      std::uint16_t h[16];
      std::uint16_t* to = whole ? reinterpret_cast<std::uint16_t*>(s.values) + pos : h;
      if (s.wire == dtype::f16)
        vstore_f16(to, vfrombits(vload_u(tv)));
      else
        vstore_bf16(to, vfrombits(vload_u(tv)));
      if (!whole) std::memcpy(s.values + pos * 2, h, c * 2u);
    }
  }
  if (!s.index64) {
    if (whole) {
      vcompress_store(reinterpret_cast<std::uint32_t*>(s.index) + pos, sel, index32);
      if (s.patch) vcompress_store(ti, sel, offs);
    } else {
      vcompress_store(ti, sel, index32);
      std::memcpy(s.index + pos * 4, ti, c * 4u);
      if (s.patch) vcompress_store(ti, sel, offs);
    }
  } else {
    vcompress_store(ti, sel, offs);
    for (unsigned l = 0; l < c; ++l) {
      const std::uint64_t i = base + ti[l];
      std::memcpy(s.index + (pos + l) * 8, &i, 8);
    }
  }
  if (s.patch) {
    const vf16 p = vfrombits(vload_u(tv));
    float r[16];
    vstore(r, p - vwire_roundtrip(p, s.wire));
    for (unsigned l = 0; l < c; ++l) s.patch[base + ti[l]] = r[l];
  }
  return c;
}

//! Writes `count` collected candidates (f32 bits and offsets from `base`) as entries pos,
//! pos + 1, ... (the caller owns [pos, end)); returns the position after the last.
inline std::uint64_t sink_put_all(const sparse_sink& sink, std::uint64_t pos, std::uint64_t end,
                                  const std::uint32_t* vals, const std::uint32_t* offs,
                                  std::uint64_t count, std::uint64_t base) {
  for (std::uint64_t j = 0; j < count; j += 16) {
    const mask16 valid =
        count - j >= 16 ? mask16{0xFFFF} : lanes_below(static_cast<unsigned>(count - j));
    pos += sink_put(sink, pos, end, valid, vload_u(vals + j), vload_u(offs + j), base);
  }
  return pos;
}

//! The k entries of largest key among the collected candidates (sum of cnt >= k >= 1), ties
//! to the lower index, written in index order: radix select finds the k-th key T, each task
//! counts its keys > T and == T, a prefix over tasks hands the first k - count(> T) ties to
//! the lowest tasks, and each task compacts its region at its offset.
inline void sel_emit_top(const sel_space& s, std::uint64_t k, const sparse_sink& sink) {
  const region_parts rp = region_parts_of(s);
  const radix_pick pick = radix_select(s, rp.parts, k, [&](std::uint64_t p, const auto& fn) {
    for (std::uint64_t t = p * rp.per; t < std::min(s.tasks, (p + 1) * rp.per); ++t)
      fn(s.vals + t * s.region, s.cnt[t]);
  });
  const vu16 tv = vset1u(pick.key);
  sel_run(s, s.tasks, [&](std::uint64_t t) {
    const std::uint32_t* vals = s.vals + t * s.region;
    std::uint64_t gt = 0, eq = 0;
    for (std::uint64_t j = 0; j < s.cnt[t]; j += 16) {
      const mask16 valid =
          s.cnt[t] - j >= 16 ? mask16{0xFFFF} : lanes_below(static_cast<unsigned>(s.cnt[t] - j));
      const vu16 key = vsel_key(vload_u(vals + j));
      gt += vpopcount(mask_and(vgti(key, tv), valid));
      eq += vpopcount(mask_and(vequ(key, tv), valid));
    }
    s.gt[t] = gt;
    s.aux[t] = eq;
  });
  std::uint64_t ties = k - pick.above, at = 0;
  for (std::uint64_t t = 0; t < s.tasks; ++t) {
    s.take[t] = std::min(ties, s.aux[t]);
    ties -= s.take[t];
    s.off[t] = at;
    at += s.gt[t] + s.take[t];
  }
  sel_run(s, s.tasks, [&](std::uint64_t t) {
    const std::uint32_t* vals = s.vals + t * s.region;
    const std::uint32_t* offs = s.offs + t * s.region;
    const std::uint64_t end = s.out_end(t);
    std::uint64_t pos = s.off[t], quota = s.take[t];
    for (std::uint64_t j = 0; j < s.cnt[t] && pos < end; j += 16) {
      const mask16 valid =
          s.cnt[t] - j >= 16 ? mask16{0xFFFF} : lanes_below(static_cast<unsigned>(s.cnt[t] - j));
      const vu16 bits = vload_u(vals + j), key = vsel_key(bits);
      mask16 sel = mask_and(vgti(key, tv), valid);
      if (quota > 0) {
        const mask16 eq = keep_lowest(mask_and(vequ(key, tv), valid), quota);
        quota -= vpopcount(eq);
        sel = static_cast<mask16>(sel | eq);
      }
      if (sel) pos += sink_put(sink, pos, end, sel, bits, vload_u(offs + j), s.begin(t));
    }
  });
}

//! Task t of a pass over the data writing entries straight from it: every element with key
//! >= at plus, when Fill, the first take[t] other elements, at off[t] (gt[t] must hold its
//! count of key >= at). WriteRes stores the error-feedback residual p - decoded(p) of every
//! element (decoded = 0 where not sent) into res. Returns whether any value was non-finite.
template <bool Fill, bool WriteRes, class Src>
inline bool sel_emit_direct_task(const sel_space& s, const Src& src, std::uint64_t t,
                                 std::uint32_t at, const sparse_sink& sink, tensor_view res) {
  const std::uint64_t b = s.begin(t), e = s.end(t), end = s.out_end(t);
  std::uint64_t pos = s.off[t], quota = Fill ? s.take[t] : 0;
  const vu16 finite_max = vset1u(sel_max_finite_key), atm1 = vset1u(at - 1u);
  unsigned nonfinite = 0;
  // One vector: its entries and its residual.
  auto step = [&](std::uint64_t i, vf16 p, mask16 sel, unsigned r) GRADCODEC_VLAMBDA {
    if (sel)
      pos += sink_put(sink, pos, end, sel, vbits(p),
                      viota() + vset1u(static_cast<std::uint32_t>(i - b)), b);
    if (WriteRes) {
      const vf16 rv = sel ? vselect(sel, p - vwire_roundtrip(p, sink.wire), p) : p;
      if (r == 16)
        vstore_any(res.data, res.type, i, rv);
      else
        vstore_any_n(res.data, res.type, i, rv, r);
    }
  };
  auto select = [&](vf16 p, mask16 valid) GRADCODEC_VLAMBDA {
    const vu16 key = vsel_key(vbits(p));
    nonfinite |= mask_and(vgti(key, finite_max), valid);
    mask16 sel = mask_and(vgti(key, atm1), valid);
    if (Fill && quota > 0) {
      const mask16 fill = keep_lowest(mask_and(static_cast<mask16>(~sel), valid), quota);
      quota -= vpopcount(fill);
      sel = static_cast<mask16>(sel | fill);
    }
    return sel;
  };
  std::uint64_t i = b;
  if (!WriteRes) {
    // Most vectors send nothing: scan four at a time, revisit only groups that do.
    for (; i + 64 <= e && !(Fill && quota > 0); i += 64) {
      mask16 m[4];
      for (unsigned u = 0; u < 4; ++u) m[u] = select(src.load(i + 16 * u), 0xFFFF);
      if ((m[0] | m[1] | m[2] | m[3]) == 0) continue;
      for (unsigned u = 0; u < 4; ++u)
        if (m[u]) step(i + 16 * u, src.load(i + 16 * u), m[u], 16);
    }
  }
  for (; i < e; i += 16) {
    const unsigned r = e - i >= 16 ? 16u : static_cast<unsigned>(e - i);
    const vf16 p = r == 16 ? src.load(i) : src.load_n(i, r);
    step(i, p, select(p, lanes_below(r)), r);
  }
  return nonfinite != 0;
}

//! sel_emit_direct_task for every task. Returns whether any value was non-finite.
template <bool Fill, bool WriteRes>
inline bool sel_emit_direct(const sel_space& s, const psource& source, std::uint32_t at,
                            const sparse_sink& sink, tensor_view res) {
  std::atomic<bool> bad{false};
  visit_source(source, [&](const auto& src) {
    sel_run(s, s.tasks, [&](std::uint64_t t) {
      if (sel_emit_direct_task<Fill, WriteRes>(s, src, t, at, sink, res))
        bad.store(true, std::memory_order_relaxed);
    });
  });
  return bad.load();
}

//! After a collecting filter pass at `at`: writes every candidate of every task at off[t]
//! (gt[t] = cnt[t], take[t] = 0). A complete task copies its region; an incomplete one reads
//! its elements from `source` again (sel_emit_direct_task).
inline void sel_emit_collected(const sel_space& s, const psource& source, std::uint32_t at,
                               const sparse_sink& sink) {
  visit_source(source, [&](const auto& src) {
    sel_run(s, s.tasks, [&](std::uint64_t t) {
      if (!s.complete(t)) {
        sel_emit_direct_task<false, false>(s, src, t, at, sink, {});
        return;
      }
      sink_put_all(sink, s.off[t], s.out_end(t), s.vals + t * s.region, s.offs + t * s.region,
                   s.cnt[t], s.begin(t));
    });
  });
}

//! The error-feedback residual after sel_emit_top: res = p - decoded(p) everywhere, the sent
//! entries of task t being payload entries [off[t], out_end(t)).
inline void sel_residual(const sel_space& s, const psource& source, const sparse_sink& sink,
                         tensor_view res) {
  visit_source(source, [&](const auto& src) {
    sel_run(s, s.tasks, [&](std::uint64_t t) {
      const std::uint64_t b = s.begin(t), e = s.end(t), last = s.out_end(t);
      std::uint64_t j = s.off[t];
      auto index_at = [&](std::uint64_t q) -> std::uint64_t {
        if (sink.index64) {
          std::uint64_t v;
          std::memcpy(&v, sink.index + q * 8, 8);
          return v;
        }
        std::uint32_t v;
        std::memcpy(&v, sink.index + q * 4, 4);
        return v;
      };
      for (std::uint64_t i = b; i < e; i += 16) {
        const unsigned r = e - i >= 16 ? 16u : static_cast<unsigned>(e - i);
        const vf16 p = r == 16 ? src.load(i) : src.load_n(i, r);
        unsigned sent = 0;
        for (; j < last; ++j) {
          const std::uint64_t at = index_at(j);
          if (at >= i + r) break;
          sent |= 1u << (at - i);
        }
        const vf16 rv =
            sent ? vselect(static_cast<mask16>(sent), p - vwire_roundtrip(p, sink.wire), p) : p;
        if (r == 16)
          vstore_any(res.data, res.type, i, rv);
        else
          vstore_any_n(res.data, res.type, i, rv, r);
      }
    });
  });
}
