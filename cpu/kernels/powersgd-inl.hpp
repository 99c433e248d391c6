// SPDX-License-Identifier: Apache-2.0
//! @file
//! PowerSGD (docs/codecs.md "powersgd") on the CPU: the stateless codec (encode, decode,
//! decode-accumulate, fused error feedback) and the kernels of the phase API
//! (contract/powersgd_kernels.hpp), bit-identical to reference/powersgd.cpp and the scalar phases
//! in src/powersgd.cpp. Included inside an ISA namespace after simd-inl.hpp and
//! philox-inl.hpp.
//!
//! Every product is a canonical sum, so the loops follow its lanes instead of a GEMM's:
//! - P = M Q: lanes along j (a row of M is contiguous), one accumulator per column of Q,
//!   which is read transposed (Q^T[c][j..j+15] contiguous).
//! - Q = M^T P: the sum runs over rows, lane (i mod 256) mod 16. Lane l of a 256-row chunk
//!   holds rows l, l+16, ..., l+240: its 16 terms are accumulated in registers, vectorised
//!   along j, and the 16 lane results are folded (8, 4, 2, 1) as a binary counter over the
//!   lanes in bit-reversed order (0, 8, 4, 12, ...), then the chunk result joins the binary
//!   counter of chunk sums. Both counters live in scratch buffers of width r x (column block).
//! - out = P Q^T: r <= 64 terms per element (one chunk): lanes are the c's, vectorised along j.
//! - Gram-Schmidt: canonical sums over the rows of a column, contiguous when the matrix is
//!   stored transposed (the codec keeps P and Q that way), strided for the phase API's
//!   row-major P.
//! Fused error feedback: the first pass stores M = g + e into an f32 residual, the others
//! read it back, and the last writes e = M - out next to out (three passes over M in all,
//! the minimum: P-hat needs all of P, and Q all of M).

// ---- Small helpers ---------------------------------------------------------------------

// The per-vector helpers below take and return vf16 by value: when GCC declines to inline
// them (the dtype switches look big), every call goes through memory and the kernels run 3-4x
// slower, so they are forced inline (and so are their lambdas: GRADCODEC_VLAMBDA).
#define GRADCODEC_PSGD_INLINE [[gnu::always_inline]] inline

inline constexpr std::uint64_t psgd_chunk = 256;

#if GRADCODEC_CPU_LEVEL == 2
inline constexpr int psgd_p_cr = 8;  // columns of Q per register group in P = M Q
inline constexpr int psgd_q_cr = 4;  // columns of P per register group in Q = M^T P
inline constexpr int psgd_q_jw = 4;  // vectors along j per register group in Q = M^T P
#else
inline constexpr int psgd_p_cr = 4;
inline constexpr int psgd_q_cr = 4;
inline constexpr int psgd_q_jw = 1;
#endif

inline std::uint64_t psgd_round16(std::uint64_t x) { return (x + 15u) & ~std::uint64_t{15}; }
inline std::uint64_t psgd_align64(std::uint64_t bytes) {
  return (bytes + 63u) & ~std::uint64_t{63};
}
//! Entries a binary counter over `leaves` values can hold at once (bit width, at least 1).
inline int psgd_levels(std::uint64_t leaves) {
  return leaves <= 1 ? 1 : 64 - __builtin_clzll(leaves);
}
inline int psgd_popcount(std::uint64_t x) { return __builtin_popcountll(x); }
inline int psgd_trailing_ones(std::uint64_t x) {
  return x == ~std::uint64_t{0} ? 64 : __builtin_ctzll(~x);
}
//! Lane folded in position s of the fold tree: 0, 8, 4, 12, 2, 10, ... (4-bit reversal).
inline int psgd_brev4(int s) {
  return ((s & 1) << 3) | ((s & 2) << 1) | ((s & 4) >> 1) | ((s & 8) >> 3);
}
inline std::uint64_t psgd_floor_pow2(std::uint64_t x) {
  return x == 0 ? 0 : std::uint64_t{1} << (63 - __builtin_clzll(x));
}

GRADCODEC_PSGD_INLINE vf16 psgd_load(const float* p, unsigned cnt) {
  return cnt == 16 ? vload(p) : vload_n(p, cnt);
}
GRADCODEC_PSGD_INLINE void psgd_store(float* p, vf16 v, unsigned cnt) {
  if (cnt == 16)
    vstore(p, v);
  else
    vstore_n(p, v, cnt);
}
GRADCODEC_PSGD_INLINE vf16 psgd_load_any(const void* base, dtype t, std::uint64_t k, unsigned cnt) {
  if (t == dtype::f32) return psgd_load(static_cast<const float*>(base) + k, cnt);
  if (cnt < 16) return vload_any_n(base, t, k, cnt);
  const std::uint16_t* h = static_cast<const std::uint16_t*>(base) + k;
  return t == dtype::f16 ? vload_f16(h) : vload_bf16(h);
}
GRADCODEC_PSGD_INLINE void psgd_store_any(void* base, dtype t, std::uint64_t k, vf16 v,
                                          unsigned cnt) {
  if (t == dtype::f32) return psgd_store(static_cast<float*>(base) + k, v, cnt);
  if (cnt < 16) return vstore_any_n(base, t, k, v, cnt);
  std::uint16_t* h = static_cast<std::uint16_t*>(base) + k;
  if (t == dtype::f16)
    vstore_f16(h, v);
  else
    vstore_bf16(h, v);
}

//! Calls fn.template operator()<N>() for N = n, 1 <= n <= Max.
template <int Max, class Fn>
inline void psgd_width(int n, Fn&& fn) {
  if constexpr (Max >= 1) {
    if (n == Max) {
      fn.template operator()<Max>();
      return;
    }
    psgd_width<Max - 1>(n, fn);
  }
}

//! A matrix of f32 whose element (k, c) sits at a[k * ks + c * cs]: row-major (ks = r,
//! cs = 1) or transposed, one contiguous column per c (ks = 1, cs = leading dimension).
struct psgd_mat {
  float* a;
  std::uint64_t ks, cs;
  float& at(std::uint64_t k, std::uint64_t c) const { return a[k * ks + c * cs]; }
};

//! Merges a new leaf into the shared-height counter state (heights, top) of many parallel
//! counters: returns how many entries it merges with; the caller combines its values as
//! part[top-1] + (part[top-2] + ...) on the leaf and stores the result at part[new top - 1].
inline int psgd_counter_merges(const int* height, int top) {
  int k = 0;
  while (k < top && height[top - 1 - k] == k) ++k;
  return k;
}

// ---- Sources of M ---------------------------------------------------------------------
// load(row, j, cnt): M[row][j .. j+cnt) as f32 (other lanes +0.0). The first pass over a row
// (P = M Q) also gets target(row, j0, buf): where it stores M as f32 for the columns of Q
// still to come (null: M is already f32 in memory, f32(row, j0, buf) points at it).
// prefetch(row, j): the lane-major reads of Q = M^T P (16 rows at once, each advancing by
// one vector) outrun the hardware prefetchers; a software prefetch 1 KB ahead in the same
// row almost halves that pass on a 4096 x 4096 matrix.

inline constexpr std::uint64_t psgd_prefetch_ahead = 256;  // floats

GRADCODEC_PSGD_INLINE void psgd_prefetch(const void* base, dtype t, std::uint64_t k) {
  prefetch_element<3>(base, t, k + psgd_prefetch_ahead);
}

//! Every load of M, and the out pass's loads of what it updates, also prefetch 8 KiB (f32)
//! ahead into L2: the hardware prefetchers alone left the memory idle for much of the row
//! passes, and the L2 keeps more misses in flight than the L1 (AVX-512 on Zen 4, 4096^2,
//! rank 4: encode_with_feedback 35-37 -> 23-26 ms, docs/performance.md).
inline constexpr std::uint64_t psgd_stream_ahead = 2048;  // elements

GRADCODEC_PSGD_INLINE void psgd_stream_prefetch(const void* base, dtype t, std::uint64_t k) {
  prefetch_element<1>(base, t, k + psgd_stream_ahead);
}

//! M read from the encoded tensor (any dtype).
struct psgd_src_view {
  static constexpr std::uint64_t buffer_floats = 4096;
  static constexpr bool writeback = false;
  const void* data;
  dtype type;
  std::uint64_t cols;
  GRADCODEC_PSGD_INLINE vf16 load(std::uint64_t row, std::uint64_t j, unsigned cnt) const {
    psgd_stream_prefetch(data, type, row * cols + j);
    return psgd_load_any(data, type, row * cols + j, cnt);
  }
  GRADCODEC_PSGD_INLINE void prefetch(std::uint64_t row, std::uint64_t j) const {
    psgd_prefetch(data, type, row * cols + j);
  }
  float* target(std::uint64_t, std::uint64_t, float* buf) const {
    return type == dtype::f32 ? nullptr : buf;
  }
  const float* f32(std::uint64_t row, std::uint64_t j0, const float* buf) const {
    return type == dtype::f32 ? static_cast<const float*>(data) + row * cols + j0 : buf;
  }
};

//! M = g + e (the codec's generic composition adds in that order) or e + g (the phase API:
//! residual + grad). With WriteBack the residual is f32 and receives M.
template <bool WriteBack>
struct psgd_src_sum {
  static constexpr std::uint64_t buffer_floats = WriteBack ? 1 : 4096;
  static constexpr bool writeback = WriteBack;
  const void* g;
  dtype gt;
  void* e;
  dtype et;
  std::uint64_t cols;
  bool e_first;
  GRADCODEC_PSGD_INLINE vf16 load(std::uint64_t row, std::uint64_t j, unsigned cnt) const {
    const std::uint64_t k = row * cols + j;
    psgd_stream_prefetch(g, gt, k);
    psgd_stream_prefetch(e, et, k);
    const vf16 gv = psgd_load_any(g, gt, k, cnt), ev = psgd_load_any(e, et, k, cnt);
    return e_first ? vadd_nan_first(ev, gv) : vadd_nan_first(gv, ev);
  }
  GRADCODEC_PSGD_INLINE void prefetch(std::uint64_t row, std::uint64_t j) const {
    psgd_prefetch(g, gt, row * cols + j);
    psgd_prefetch(e, et, row * cols + j);
  }
  float* target(std::uint64_t row, std::uint64_t j0, float* buf) const {
    return WriteBack ? static_cast<float*>(e) + row * cols + j0 : buf;
  }
  const float* f32(std::uint64_t row, std::uint64_t j0, const float* buf) const {
    return WriteBack ? static_cast<const float*>(e) + row * cols + j0 : buf;
  }
};

//! M held as f32 (the phase API's residual, or the codec's residual after the first pass).
struct psgd_src_f32 {
  static constexpr std::uint64_t buffer_floats = 1;
  static constexpr bool writeback = false;
  const float* m;
  std::uint64_t cols;
  GRADCODEC_PSGD_INLINE vf16 load(std::uint64_t row, std::uint64_t j, unsigned cnt) const {
    psgd_stream_prefetch(m, dtype::f32, row * cols + j);
    return psgd_load(m + row * cols + j, cnt);
  }
  GRADCODEC_PSGD_INLINE void prefetch(std::uint64_t row, std::uint64_t j) const {
    psgd_prefetch(m, dtype::f32, row * cols + j);
  }
  float* target(std::uint64_t, std::uint64_t, float*) const { return nullptr; }
  const float* f32(std::uint64_t row, std::uint64_t j0, const float*) const {
    return m + row * cols + j0;
  }
};

//! Largest |v| bits seen, lane-wise (NaN and +-Inf have the largest: >= 0x7F800000).
GRADCODEC_PSGD_INLINE vu16 psgd_scan(vu16 mx, vf16 v) {
  return vmaxu(mx, vbits(v) & vset1u(0x7FFFFFFFu));
}
inline bool psgd_scan_finite(vu16 mx) { return vltu(mx, vset1u(0x7F800000u)) == 0xFFFFu; }

// ---- Q read transposed, tile by tile ---------------------------------------------------
// tile(j0, n, r, buf, ptr): ptr[c] points at Q[j0][c], Q[j0+1][c], ... (n values, contiguous).

//! Q already stored transposed (column c of Q at qt + c * ld).
struct psgd_qt_direct {
  static constexpr std::uint64_t buffer_floats = 1;
  const float* qt;
  std::uint64_t ld;
  std::uint64_t max_tile(std::uint32_t) const { return ~std::uint64_t{0}; }
  void tile(std::uint64_t j0, std::uint64_t, std::uint32_t r, float*, const float** ptr) const {
    for (std::uint32_t c = 0; c < r; ++c) ptr[c] = qt + c * ld + j0;
  }
};

//! Q row-major (cols x r): f32 in memory, or f32 in a frame payload (read with memcpy).
template <bool Bytes>
struct psgd_qt_rows {
  static constexpr std::uint64_t buffer_floats = 16384;
  const void* q;
  std::uint64_t max_tile(std::uint32_t r) const { return buffer_floats / r; }
  void tile(std::uint64_t j0, std::uint64_t n, std::uint32_t r, float* buf,
            const float** ptr) const {
    for (std::uint32_t c = 0; c < r; ++c) ptr[c] = buf + c * n;
    for (std::uint64_t j = 0; j < n; ++j) {
      for (std::uint32_t c = 0; c < r; ++c) {
        float x;
        if constexpr (Bytes)
          std::memcpy(&x, static_cast<const std::byte*>(q) + 4 * ((j0 + j) * r + c), 4);
        else
          x = static_cast<const float*>(q)[(j0 + j) * r + c];
        buf[c * n + j] = x;
      }
    }
  }
};

// ---- P = M Q ----------------------------------------------------------------------------

//! Counter of N parallel canonical sums over the chunks of one tile.
template <int N>
struct psgd_tile_counter {
  float part[64][N];
  int height[64];
  int top = 0;
  void push(const float* s) {
    float v[N];
    for (int c = 0; c < N; ++c) v[c] = s[c];
    int h = 0;
    while (top > 0 && height[top - 1] == h) {
      --top;
      for (int c = 0; c < N; ++c) v[c] = part[top][c] + v[c];
      ++h;
    }
    for (int c = 0; c < N; ++c) part[top][c] = v[c];
    height[top++] = h;
  }
  void result(float* out) const {
    if (top == 0) {
      for (int c = 0; c < N; ++c) out[c] = 0.0f;
      return;
    }
    int t = top - 1;
    for (int c = 0; c < N; ++c) out[c] = part[t][c];
    while (t > 0) {
      --t;
      for (int c = 0; c < N; ++c) out[c] = part[t][c] + out[c];
    }
  }
};

//! The canonical sums over one tile of one row for N columns of Q: chunks of 256 values
//! relative to the row start (tiles start at multiples of 256), combined by a tile-local
//! counter. get(j, cnt) gives M[row][j0 + j ..], qt[c] points at Q^T[c][j0].
template <int N, bool Scan, class Get>
GRADCODEC_PSGD_INLINE void psgd_p_tile_row(const Get& get, std::uint64_t n, const float* const* qt,
                                           float* val, vu16& scan) {
  psgd_tile_counter<N> ctr;
  vu16 mx = scan;  // a local, so that it stays in a register
  for (std::uint64_t k0 = 0; k0 < n; k0 += psgd_chunk) {
    const std::uint64_t kend = std::min(n, k0 + psgd_chunk);
    vf16 acc[N];
#pragma GCC unroll 16
    for (int c = 0; c < N; ++c) acc[c] = vzero();
    std::uint64_t j = k0;
    for (; j + 16 <= kend; j += 16) {
      const vf16 mv = get(j, 16u);
      if constexpr (Scan) mx = psgd_scan(mx, mv);
#pragma GCC unroll 16
      for (int c = 0; c < N; ++c) acc[c] = acc[c] + mv * vload(qt[c] + j);
    }
    if (j < kend) {
      // Missing values: both factors load as +0.0, and lane + (+0.0) leaves the lane as is.
      const auto cnt = static_cast<unsigned>(kend - j);
      const vf16 mv = get(j, cnt);
      if constexpr (Scan) mx = psgd_scan(mx, mv);
#pragma GCC unroll 16
      for (int c = 0; c < N; ++c) acc[c] = acc[c] + mv * vload_n(qt[c] + j, cnt);
    }
    float sum[N];
#pragma GCC unroll 16
    for (int c = 0; c < N; ++c) sum[c] = vfold(acc[c]);
    ctr.push(sum);
  }
  ctr.result(val);
  scan = mx;
}

//! P[i][c] for rows [i0, i1): tiles of a power-of-two number of chunks, so that every full
//! tile is one node of the pairwise tree and the tile values combine by a counter of their
//! own (the last, shorter tile folds its chunks first: the same operations as the counter
//! over all chunks). The first group of columns of Q reads M from the source (converting,
//! adding g + e, storing M where the source wants it, scanning for NaN/Inf when Scan); the
//! other groups read the f32 copy. Returns false when Scan saw NaN or Inf.
template <bool Scan, class Src, class Qt>
inline bool psgd_p_rows(const Src& src, const Qt& qt, std::uint64_t i0, std::uint64_t i1,
                        std::uint64_t cols, std::uint32_t r, const psgd_mat& p) {
  std::uint64_t jt =
      std::min(qt.max_tile(r), Src::buffer_floats > 1 ? Src::buffer_floats : ~std::uint64_t{0});
  jt = std::max<std::uint64_t>(psgd_chunk, psgd_floor_pow2(jt));
  if (jt >= cols) jt = cols;
  const std::uint64_t tiles = (cols + jt - 1) / jt;
  alignas(64) float qbuf[Qt::buffer_floats];
  alignas(64) float rowbuf[Src::buffer_floats];
  constexpr std::uint64_t rc_floats = 4096;
  alignas(64) float rc[rc_floats];
  const int lt = psgd_levels(tiles);
  const std::uint64_t rb =
      tiles == 1
          ? i1 - i0
          : std::clamp<std::uint64_t>(rc_floats / (static_cast<std::uint64_t>(lt) * r), 1, i1 - i0);
  const float* qp[64];
  float val[64];
  vu16 mx = vset1u(0);
  for (std::uint64_t b0 = i0; b0 < i1; b0 += rb) {
    const std::uint64_t b1 = std::min(i1, b0 + rb);
    int height[64];
    int top = 0;
    for (std::uint64_t t = 0; t < tiles; ++t) {
      const std::uint64_t j0 = t * jt, n = std::min(jt, cols - j0);
      qt.tile(j0, n, r, qbuf, qp);
      const int k = psgd_counter_merges(height, top);
      for (std::uint64_t i = b0; i < b1; ++i) {
        // The f32 copy is needed by the other column groups, or is the point (write-back).
        float* dst = Src::writeback || r > psgd_p_cr ? src.target(i, j0, rowbuf) : nullptr;
        const float* m = src.f32(i, j0, rowbuf);
        psgd_width<psgd_p_cr>(static_cast<int>(std::min<std::uint32_t>(psgd_p_cr, r)),
                              [&]<int N>() {
                                psgd_p_tile_row<N, Scan>(
                                    [&](std::uint64_t j, unsigned cnt) GRADCODEC_VLAMBDA {
                                      const vf16 v = src.load(i, j0 + j, cnt);
                                      if (dst != nullptr) psgd_store(dst + j, v, cnt);
                                      return v;
                                    },
                                    n, qp, val, mx);
                              });
        for (std::uint32_t c0 = psgd_p_cr; c0 < r; c0 += psgd_p_cr)
          psgd_width<psgd_p_cr>(
              static_cast<int>(std::min<std::uint32_t>(psgd_p_cr, r - c0)), [&]<int N>() {
                psgd_p_tile_row<N, false>([&](std::uint64_t j, unsigned cnt)
                                              GRADCODEC_VLAMBDA { return psgd_load(m + j, cnt); },
                                          n, qp + c0, val + c0, mx);
              });
        if (tiles == 1) {
          for (std::uint32_t c = 0; c < r; ++c) p.at(i, c) = val[c];
          continue;
        }
        float* part = rc + (i - b0) * static_cast<std::uint64_t>(lt) * r;
        for (std::uint32_t c = 0; c < r; ++c) {
          float v = val[c];
          for (int e = 1; e <= k; ++e) v = part[(top - e) * r + c] + v;
          part[(top - k) * r + c] = v;
        }
      }
      top -= k;
      height[top++] = k;
    }
    if (tiles == 1) continue;
    for (std::uint64_t i = b0; i < b1; ++i) {
      const float* part = rc + (i - b0) * static_cast<std::uint64_t>(lt) * r;
      for (std::uint32_t c = 0; c < r; ++c) {
        float v = part[(top - 1) * r + c];
        for (int e = top - 2; e >= 0; --e) v = part[e * r + c] + v;
        p.at(i, c) = v;
      }
    }
  }
  return psgd_scan_finite(mx);
}

//! Rows per task of the row-parallel passes: about 2^18 elements, at least 64 rows (a task
//! transposes the tiles of Q it needs once, for all its rows).
inline std::uint64_t psgd_rows_per_task(std::uint64_t cols) {
  return std::max<std::uint64_t>(64, (std::uint64_t{1} << 18) / std::max<std::uint64_t>(cols, 1));
}

template <bool Scan, class Src, class Qt>
inline bool psgd_compute_p(const Src& src, const Qt& qt, std::uint64_t rows, std::uint64_t cols,
                           std::uint32_t r, const psgd_mat& p, int threads) {
  const std::uint64_t per = psgd_rows_per_task(cols);
  const std::uint64_t tasks = (rows + per - 1) / per;
  std::atomic<bool> bad{false};
  parallel_for(threads_for(threads, tasks), tasks, [&](std::uint64_t t) {
    const std::uint64_t i0 = t * per, i1 = std::min(rows, i0 + per);
    if (!psgd_p_rows<Scan>(src, qt, i0, i1, cols, r, p)) bad.store(true, std::memory_order_relaxed);
  });
  return bad.load();
}

// ---- Gram-Schmidt -----------------------------------------------------------------------

GRADCODEC_PSGD_INLINE vf16 psgd_col_load(const psgd_mat& a, std::uint32_t c, std::uint64_t k,
                                         unsigned cnt) {
  if (a.ks == 1) return psgd_load(a.a + c * a.cs + k, cnt);
  alignas(64) float t[16] = {};
  for (unsigned l = 0; l < cnt; ++l) t[l] = a.at(k + l, c);
  return vload(t);
}
GRADCODEC_PSGD_INLINE void psgd_col_store(const psgd_mat& a, std::uint32_t c, std::uint64_t k,
                                          vf16 v, unsigned cnt) {
  if (a.ks == 1) return psgd_store(a.a + c * a.cs + k, v, cnt);
  alignas(64) float t[16];
  vstore(t, v);
  for (unsigned l = 0; l < cnt; ++l) a.at(k + l, c) = t[l];
}

//! canonical_sum over k of A[k][j] * A[k][i].
inline float psgd_col_dot(const psgd_mat& a, std::uint64_t rows, std::uint32_t j, std::uint32_t i) {
  blocks::pairwise_sum ctr;
  for (std::uint64_t k0 = 0; k0 < rows; k0 += psgd_chunk) {
    const std::uint64_t kend = std::min(rows, k0 + psgd_chunk);
    vf16 acc = vzero();
    for (std::uint64_t k = k0; k < kend; k += 16) {
      const auto cnt = static_cast<unsigned>(std::min<std::uint64_t>(16, kend - k));
      acc = acc + psgd_col_load(a, j, k, cnt) * psgd_col_load(a, i, k, cnt);
    }
    ctr.push(vfold(acc));
  }
  return ctr.total();
}

//! orth(A, rows, r, eps) of docs/codecs.md, in place.
inline void psgd_orthogonalize(const psgd_mat& a, std::uint64_t rows, std::uint32_t r, float eps) {
  for (std::uint32_t j = 0; j < r; ++j) {
    for (int pass = 0; pass < 2; ++pass) {
      for (std::uint32_t i = 0; i < j; ++i) {
        const vf16 d = vset1(psgd_col_dot(a, rows, j, i));
        for (std::uint64_t k = 0; k < rows; k += 16) {
          const auto cnt = static_cast<unsigned>(std::min<std::uint64_t>(16, rows - k));
          const vf16 t = d * psgd_col_load(a, i, k, cnt);
          psgd_col_store(a, j, k, psgd_col_load(a, j, k, cnt) - t, cnt);
        }
      }
    }
    const vf16 den = vset1(std::sqrt(psgd_col_dot(a, rows, j, j)) + eps);
    for (std::uint64_t k = 0; k < rows; k += 16) {
      const auto cnt = static_cast<unsigned>(std::min<std::uint64_t>(16, rows - k));
      psgd_col_store(a, j, k, psgd_col_load(a, j, k, cnt) / den, cnt);
    }
  }
}

// ---- Q = M^T P ----------------------------------------------------------------------------

//! Lane l's 16 (or fewer) rows of one chunk, for CN columns of P and JW vectors along j.
template <int CN, int JW, class Src>
GRADCODEC_PSGD_INLINE void psgd_q_leaf(const Src& m, const psgd_mat& p, std::uint64_t row,
                                       std::uint64_t nt, std::uint32_t c0, std::uint64_t j,
                                       unsigned cnt, vf16 (&acc)[CN][JW]) {
#pragma GCC unroll 16
  for (int c = 0; c < CN; ++c)
#pragma GCC unroll 16
    for (int w = 0; w < JW; ++w) acc[c][w] = vzero();
  for (std::uint64_t t = 0; t < nt; ++t, row += 16) {
    vf16 pb[CN];
#pragma GCC unroll 16
    for (int c = 0; c < CN; ++c) pb[c] = vset1(p.at(row, c0 + static_cast<std::uint32_t>(c)));
#pragma GCC unroll 16
    for (int w = 0; w < JW; ++w) {
      m.prefetch(row, j + 16u * static_cast<unsigned>(w));
      const vf16 mv = m.load(row, j + 16u * static_cast<unsigned>(w), JW == 1 ? cnt : 16u);
#pragma GCC unroll 16
      for (int c = 0; c < CN; ++c) acc[c][w] = acc[c][w] + mv * pb[c];
    }
  }
}

//! Scratch of one column block: 4 lane-fold buffers, then the chunk counter's entries; each
//! buffer holds cn x jbp floats (column c of the block at c * jbp).
struct psgd_q_scratch {
  float* lanes;
  float* chunks;
  std::uint64_t plane, jbp;
};

//! Adds a lane result (leaf s of the fold tree, in registers) into the lane counter, and at
//! the last leaf the chunk result into the chunk counter (ce entries, ck merges).
template <int CN, int JW>
GRADCODEC_PSGD_INLINE void psgd_q_merge(vf16 (&acc)[CN][JW], const psgd_q_scratch& sc,
                                        std::uint32_t cl, std::uint64_t jl, int s, int ce, int ck) {
  const int lp = psgd_popcount(static_cast<std::uint64_t>(s));
  const int lk = psgd_trailing_ones(static_cast<std::uint64_t>(s));
#pragma GCC unroll 16
  for (int c = 0; c < CN; ++c) {
#pragma GCC unroll 16
    for (int w = 0; w < JW; ++w) {
      const std::uint64_t off =
          (cl + static_cast<std::uint64_t>(c)) * sc.jbp + jl + 16u * static_cast<unsigned>(w);
      vf16 v = acc[c][w];
      for (int e = 1; e <= lk; ++e) v = vload(sc.lanes + (lp - e) * sc.plane + off) + v;
      if (s != 15) {
        vstore(sc.lanes + (lp - lk) * sc.plane + off, v);
        continue;
      }
      for (int e = 1; e <= ck; ++e) v = vload(sc.chunks + (ce - e) * sc.plane + off) + v;
      vstore(sc.chunks + (ce - ck) * sc.plane + off, v);
    }
  }
}

//! Leaf s of one chunk over the whole block, for CN columns of P: full groups of JW vectors,
//! then the last vectors one at a time (the very last may be partial).
template <int CN, class Src>
inline void psgd_q_leaf_block(const Src& m, const psgd_mat& p, const psgd_q_scratch& sc,
                              std::uint64_t row, std::uint64_t nt, std::uint32_t c0,
                              std::uint32_t cl, std::uint64_t j0, std::uint64_t jb, int s, int ce,
                              int ck) {
  std::uint64_t jl = 0;
  for (; jl + 16u * psgd_q_jw <= jb; jl += 16u * psgd_q_jw) {
    vf16 acc[CN][psgd_q_jw];
    psgd_q_leaf<CN, psgd_q_jw>(m, p, row, nt, c0 + cl, j0 + jl, 16, acc);
    psgd_q_merge<CN, psgd_q_jw>(acc, sc, cl, jl, s, ce, ck);
  }
  for (; jl < jb; jl += 16) {
    vf16 acc[CN][1];
    const auto cnt = static_cast<unsigned>(std::min<std::uint64_t>(16, jb - jl));
    psgd_q_leaf<CN, 1>(m, p, row, nt, c0 + cl, j0 + jl, cnt, acc);
    psgd_q_merge<CN, 1>(acc, sc, cl, jl, s, ce, ck);
  }
}

//! Q[j][c] for columns [j0, j0 + jb) and c in [c0, c0 + cn): one pass over the block of M.
//! out(c, j, cnt, v) receives the results.
template <class Src, class Out>
inline void psgd_q_block(const Src& m, const psgd_mat& p, std::uint64_t rows, std::uint64_t j0,
                         std::uint64_t jb, std::uint32_t c0, std::uint32_t cn, float* scratch,
                         const Out& out) {
  psgd_q_scratch sc;
  sc.jbp = psgd_round16(jb);
  sc.plane = cn * sc.jbp;
  sc.lanes = scratch;
  sc.chunks = scratch + 4 * sc.plane;
  const std::uint64_t nchunks = (rows + psgd_chunk - 1) / psgd_chunk;
  for (std::uint64_t q = 0; q < nchunks; ++q) {
    const std::uint64_t base = q * psgd_chunk, len = std::min(psgd_chunk, rows - base);
    const int ce = psgd_popcount(q), ck = psgd_trailing_ones(q);
    for (int s = 0; s < 16; ++s) {
      const auto l = static_cast<std::uint64_t>(psgd_brev4(s));
      const std::uint64_t nt = l < len ? (len - l + 15) / 16 : 0;
      for (std::uint32_t cl = 0; cl < cn; cl += psgd_q_cr)
        psgd_width<psgd_q_cr>(
            static_cast<int>(std::min<std::uint32_t>(psgd_q_cr, cn - cl)), [&]<int CN>() {
              psgd_q_leaf_block<CN>(m, p, sc, base + l, nt, c0, cl, j0, jb, s, ce, ck);
            });
    }
  }
  const int entries = psgd_popcount(nchunks);
  for (std::uint32_t cl = 0; cl < cn; ++cl) {
    for (std::uint64_t jl = 0; jl < jb; jl += 16) {
      const std::uint64_t off = cl * sc.jbp + jl;
      vf16 v = vload(sc.chunks + (entries - 1) * sc.plane + off);
      for (int e = entries - 2; e >= 0; --e) v = vload(sc.chunks + e * sc.plane + off) + v;
      out(c0 + cl, j0 + jl, static_cast<unsigned>(std::min<std::uint64_t>(16, jb - jl)), v);
    }
  }
}

//! Floats of Q-pass scratch per column of P and per column of M.
inline std::uint64_t psgd_q_depth(std::uint64_t rows) {
  return 4 + static_cast<std::uint64_t>(psgd_levels((rows + psgd_chunk - 1) / psgd_chunk));
}

//! Q = M^T P with a bounded scratch per task (the phase API: scratch on the stack). Tasks
//! are column blocks x groups of P's columns, as wide as the scratch allows: the wider the
//! block, the longer each row's run of M and the better the hardware prefetchers follow it.
//! The columns are split evenly into a number of tasks that fills whole rounds of threads.
template <std::uint64_t Budget, class Src, class Out>
inline void psgd_compute_q_bounded(const Src& m, const psgd_mat& p, std::uint64_t rows,
                                   std::uint64_t cols, std::uint32_t r, const Out& out) {
  constexpr std::uint64_t budget = Budget;  // floats of scratch per task
  const std::uint64_t depth = psgd_q_depth(rows);
  std::uint64_t cn = r;
  // Keep blocks at least 128 columns wide (runs of 512 bytes of M per row); fewer columns of
  // P per pass when needed (then a pass re-reads its block of M).
  if (budget / (depth * cn * 16) < 8) cn = std::max<std::uint64_t>(1, budget / (depth * 16 * 8));
  const std::uint64_t max_units = std::max<std::uint64_t>(1, budget / (depth * cn * 16));
  const std::uint64_t units = (cols + 15) / 16, groups = (r + cn - 1) / cn;
  const auto th = static_cast<std::uint64_t>(threads_for(0, units * groups));
  const std::uint64_t fewest = blocks::ceil_div(units, max_units);
  const std::uint64_t nblocks =
      std::min(units, blocks::ceil_div(blocks::ceil_div(fewest * groups, th) * th, groups));
  const std::uint64_t tasks = nblocks * groups;
  parallel_for(static_cast<int>(th), tasks, [&](std::uint64_t t) {
    alignas(64) float scratch[budget];
    const std::uint64_t b = t % nblocks, g = t / nblocks;
    const std::uint64_t j0 = 16 * (b * units / nblocks);
    const std::uint64_t j1 = std::min(cols, 16 * ((b + 1) * units / nblocks));
    const auto c0 = static_cast<std::uint32_t>(g * cn);
    psgd_q_block(m, p, rows, j0, j1 - j0, c0,
                 static_cast<std::uint32_t>(std::min<std::uint64_t>(cn, r - c0)), scratch, out);
  });
}

// ---- out = P Q^T ------------------------------------------------------------------------

template <int I, int H, int Present>
GRADCODEC_PSGD_INLINE void psgd_fold_step(vf16* lane) {
  if constexpr (I < H) {
    if constexpr (I + H < Present) lane[I] = lane[I] + lane[I + H];
    psgd_fold_step<I + 1, H, Present>(lane);
  }
}
//! The fold lane[j] += lane[j + h], h = 8, 4, 2, 1, over lanes [0, R) (the others empty).
template <int R>
GRADCODEC_PSGD_INLINE vf16 psgd_fold_lanes(vf16* lane) {
  psgd_fold_step<0, 8, R>(lane);
  psgd_fold_step<0, 4, (R < 8 ? R : 8)>(lane);
  psgd_fold_step<0, 2, (R < 4 ? R : 4)>(lane);
  psgd_fold_step<0, 1, (R < 2 ? R : 2)>(lane);
  return lane[0];
}

//! One vector of out[i][j..j+15] for R <= 16 (lane c holds the single term c; lanes R..15
//! are empty) or R = 0 (any r > 16: every lane has terms). The canonical sum starts each
//! lane at +0.0 and adds +0.0 for empty lanes; here lanes start at their first term and
//! empty lanes are skipped, which differs only in giving -0.0 where the canonical sum gives
//! +0.0 (x + (+0.0) = x unless x is -0.0, and a canonical lane is never -0.0): the final
//! + 0.0f restores that.
template <int R>
GRADCODEC_PSGD_INLINE vf16 psgd_out_vec(const vf16* pb, const float* const* qt, std::uint32_t r,
                                        std::uint64_t j, unsigned cnt) {
  if constexpr (R > 0) {
    vf16 lane[R];
#pragma GCC unroll 16
    for (int c = 0; c < R; ++c) lane[c] = pb[c] * psgd_load(qt[c] + j, cnt);
    return psgd_fold_lanes<R>(lane) + vzero();
  } else {
    vf16 lane[16];
#pragma GCC unroll 16
    for (int c = 0; c < 16; ++c) lane[c] = pb[c] * psgd_load(qt[c] + j, cnt);
    for (std::uint32_t c0 = 16; c0 < r; c0 += 16)
#pragma GCC unroll 16
      for (std::uint32_t l = 0; l < 16; ++l)
        if (c0 + l < r) lane[l] = lane[l] + pb[c0 + l] * psgd_load(qt[c0 + l] + j, cnt);
    return psgd_fold_lanes<16>(lane) + vzero();
  }
}

//! Rows [i0, i1) of out = P Q^T: prow(i, dst) fills P[i][0..r), sink(i, j, cnt, o) takes
//! out[i][j..j+cnt).
template <int R, class Qt, class PRow, class Sink>
inline void psgd_out_rows(const Qt& qt, const PRow& prow, const Sink& sink, std::uint64_t i0,
                          std::uint64_t i1, std::uint64_t cols, std::uint32_t r) {
  std::uint64_t jt = std::min(qt.max_tile(r), cols);
  if (jt < cols) jt = std::max<std::uint64_t>(16, jt & ~std::uint64_t{15});
  alignas(64) float qbuf[Qt::buffer_floats];
  const float* qp[64];
  float pv[64];
  vf16 pb[64];
  for (std::uint64_t j0 = 0; j0 < cols; j0 += jt) {
    const std::uint64_t n = std::min(jt, cols - j0);
    qt.tile(j0, n, r, qbuf, qp);
    for (std::uint64_t i = i0; i < i1; ++i) {
      prow(i, pv);
      for (std::uint32_t c = 0; c < r; ++c) pb[c] = vset1(pv[c]);
      for (std::uint64_t j = 0; j < n; j += 16) {
        const auto cnt = static_cast<unsigned>(std::min<std::uint64_t>(16, n - j));
        sink(i, j0 + j, cnt, psgd_out_vec<R>(pb, qp, r, j, cnt));
      }
    }
  }
}

template <class Qt, class PRow, class Sink>
inline void psgd_compute_out(const Qt& qt, const PRow& prow, const Sink& sink, std::uint64_t rows,
                             std::uint64_t cols, std::uint32_t r, int threads) {
  const std::uint64_t per = psgd_rows_per_task(cols);
  const std::uint64_t tasks = (rows + per - 1) / per;
  parallel_for(threads_for(threads, tasks), tasks, [&](std::uint64_t t) {
    const std::uint64_t i0 = t * per, i1 = std::min(rows, i0 + per);
    if (r > 16)
      psgd_out_rows<0>(qt, prow, sink, i0, i1, cols, r);
    else
      psgd_width<16>(static_cast<int>(r),
                     [&]<int R>() { psgd_out_rows<R>(qt, prow, sink, i0, i1, cols, r); });
  });
}

//! P rows read from a psgd_mat, or from a frame payload (row-major f32, memcpy).
struct psgd_prow_mat {
  psgd_mat p;
  std::uint32_t r;
  void operator()(std::uint64_t i, float* dst) const {
    for (std::uint32_t c = 0; c < r; ++c) dst[c] = p.at(i, c);
  }
};
struct psgd_prow_bytes {
  const std::byte* p;
  std::uint32_t r;
  void operator()(std::uint64_t i, float* dst) const { std::memcpy(dst, p + 4 * i * r, 4 * r); }
};

//! Decode: out = o, or out = fma(alpha, o, out).
struct psgd_sink_decode {
  tensor_view out;
  std::uint64_t cols;
  float alpha;
  bool accumulate;
  GRADCODEC_PSGD_INLINE void operator()(std::uint64_t i, std::uint64_t j, unsigned cnt,
                                        vf16 o) const {
    const std::uint64_t k = i * cols + j;
    if (accumulate) {
      psgd_stream_prefetch(out.data, out.type, k);
      o = vfma(vset1(alpha), o, psgd_load_any(out.data, out.type, k, cnt));
    }
    psgd_store_any(out.data, out.type, k, vcanonical_nan(o), cnt);
  }
};

//! Phase finish: residual = error_feedback ? residual - o : +0.0; out = o (out's dtype).
struct psgd_sink_finish {
  float* residual;
  tensor_view out;
  std::uint64_t cols;
  bool ef;
  GRADCODEC_PSGD_INLINE void operator()(std::uint64_t i, std::uint64_t j, unsigned cnt,
                                        vf16 o) const {
    const std::uint64_t k = i * cols + j;
    if (ef) psgd_stream_prefetch(residual, dtype::f32, k);
    psgd_store(residual + k, ef ? psgd_load(residual + k, cnt) - o : vzero(), cnt);
    psgd_store_any(out.data, out.type, k, o, cnt);
  }
};

//! Fused error feedback: residual = M - decode(frame) (residual's dtype), where the decoded
//! value o has its NaNs canonical, as in the generic composition.
template <class Src>
struct psgd_sink_feedback {
  Src m;
  tensor_view residual;
  std::uint64_t cols;
  GRADCODEC_PSGD_INLINE void operator()(std::uint64_t i, std::uint64_t j, unsigned cnt,
                                        vf16 o) const {
    psgd_store_any(residual.data, residual.type, i * cols + j,
                   m.load(i, j, cnt) - vcanonical_nan(o), cnt);
  }
};

// ---- The stateless codec ---------------------------------------------------------------

using psgd_shape = powersgd_frame_shape;
inline psgd_shape psgd_shape_of(const codec_spec& spec, const_tensor_view v) {
  return powersgd_frame_shape_of(spec, v);
}

//! Encode workspace: Q^T (r x ld, ld = cols rounded up to 16; Q0, then the result Q for
//! the error-feedback pass), P^T (r x rows), then the Q pass's scratch for every column
//! (psgd_q_depth(rows) x r x ld floats, split between the column blocks).
struct psgd_ws_layout {
  std::uint64_t ld, qt, pt, scratch, total;
};
inline psgd_ws_layout psgd_ws_of(const psgd_shape& s) {
  psgd_ws_layout w{};
  w.ld = psgd_round16(s.cols);
  w.qt = 0;
  w.pt = psgd_align64(s.r * w.ld * 4);
  w.scratch = w.pt + psgd_align64(s.r * s.rows * 4);
  w.total = w.scratch + psgd_q_depth(s.rows) * s.r * w.ld * 4;
  return w;
}

inline std::size_t powersgd_workspace(const codec_spec& spec, const_tensor_view shape,
                                      operation op) {
  if (op == operation::decode || op == operation::decode_accumulate) return 0;
  const std::uint64_t rows = shape.rows > 0 ? shape.rows : 1;
  if (shape.n % rows != 0) return 0;  // the front end rejects the shape
  const psgd_shape s = psgd_shape_of(spec, shape);
  return s.r == 0 ? 0 : static_cast<std::size_t>(psgd_ws_of(s).total);
}

//! Q0 = init_q(ctx) of docs/codecs.md, written transposed (qt[c * ld + j] = Q0[j][c], zeros
//! in columns cols..ld), then orthogonalised.
inline void psgd_init_qt(const codec_spec& spec, const context& ctx, std::uint64_t cols,
                         std::uint32_t r, float* qt, std::uint64_t ld) {
  const philox16_gen g = philox16_make(blocks::counter_rng::make(ctx.seed, 0, ctx.tensor_id),
                                       blocks::rng_stream::init);
  const std::uint64_t total = cols * r;
  alignas(64) std::uint32_t words[16];
  for (std::uint64_t e0 = 0; e0 < total; e0 += 4) {
    vstore_u(words, philox16(g, 4 * e0));  // blocks e0 .. e0+3, four words each
    for (std::uint64_t q = 0; q < 4 && e0 + q < total; ++q) {
      const float u0 = blocks::uniform01(words[4 * q]), u1 = blocks::uniform01(words[4 * q + 1]);
      const float u2 = blocks::uniform01(words[4 * q + 2]),
                  u3 = blocks::uniform01(words[4 * q + 3]);
      const float s = (u0 + u1) + (u2 + u3);
      const std::uint64_t e = e0 + q;
      qt[(e % r) * ld + e / r] = (s - 2.0f) * 1.7320508f;
    }
  }
  for (std::uint32_t c = 0; c < r; ++c)
    for (std::uint64_t j = cols; j < ld; ++j) qt[c * ld + j] = 0.0f;
  psgd_orthogonalize({qt, 1, ld}, cols, r, spec.eps);
}

//! Q pass of the codec: writes Q row-major into the payload and transposed into qt.
struct psgd_q_out_codec {
  std::byte* q;
  std::uint32_t r;
  float* qt;
  std::uint64_t ld;
  GRADCODEC_PSGD_INLINE void operator()(std::uint32_t c, std::uint64_t j, unsigned cnt,
                                        vf16 v) const {
    alignas(64) float t[16];
    vstore(t, v);
    for (unsigned l = 0; l < cnt; ++l) {
      const float x = blocks::canonicalize_nan(t[l]);  // NaNs go on the wire canonical
      std::memcpy(q + 4 * ((j + l) * r + c), &x, 4);
    }
    psgd_store(qt + c * ld + j, v, cnt);
  }
};

//! Q = M^T P-hat for the codec: column blocks, each with its own part of the scratch.
template <class Src>
inline void psgd_codec_q(const Src& m, const psgd_mat& pt, const psgd_shape& s, float* scratch,
                         const psgd_q_out_codec& out, int threads) {
  const std::uint64_t units = (s.cols + 15) / 16;
  const int th = threads_for(threads, units);
  // Wide blocks keep the reads of M long; one block per thread at least.
  const std::uint64_t blocks = std::min<std::uint64_t>(
      units, std::max<std::uint64_t>(static_cast<std::uint64_t>(th), (s.cols + 2047) / 2048));
  const std::uint64_t depth = psgd_q_depth(s.rows);
  parallel_for(th, blocks, [&](std::uint64_t b) {
    const std::uint64_t u0 = b * units / blocks, u1 = (b + 1) * units / blocks;
    const std::uint64_t j0 = 16 * u0, jb = std::min(16 * u1, s.cols) - j0;
    psgd_q_block(m, pt, s.rows, j0, jb, 0, s.r, scratch + depth * s.r * j0, out);
  });
}

//! The compressed encode: Q0, P = M Q0, orth, payload P-hat, Q = M^T P-hat (payload), and
//! with Feedback the residual e = M - P-hat Q^T. src1 reads M for the first pass (it may
//! store M into an f32 residual), src reads it afterwards.
struct psgd_no_sink {};

template <class Src1, class Src, class Sink>
inline status psgd_encode_compressed(const detail::encode_call& c, const psgd_shape& s,
                                     const Src1& src1, const Src& src, const Sink& sink) {
  const blocks::powersgd_layout l = blocks::powersgd_layout_of(s.rows, s.cols, s.r);
  const psgd_ws_layout w = psgd_ws_of(s);
  if (c.workspace.size() < w.total)
    return {status_code::internal_error, "powersgd: workspace smaller than reported"};
  auto* qt = reinterpret_cast<float*>(c.workspace.data() + w.qt);
  auto* pt = reinterpret_cast<float*>(c.workspace.data() + w.pt);
  auto* scratch = reinterpret_cast<float*>(c.workspace.data() + w.scratch);
  const psgd_mat ptm{pt, 1, s.rows};

  psgd_init_qt(c.spec, c.ctx, s.cols, s.r, qt, w.ld);
  if (psgd_compute_p<true>(src1, psgd_qt_direct{qt, w.ld}, s.rows, s.cols, s.r, ptm, c.threads))
    c.hdr.flags |= flag_nonfinite;
  psgd_orthogonalize(ptm, s.rows, s.r, c.spec.eps);

  std::byte* pay = c.payload;
  for (std::uint64_t i = 0; i < s.rows; ++i)
    for (std::uint32_t k = 0; k < s.r; ++k) {
      const float x = blocks::canonicalize_nan(ptm.at(i, k));  // NaNs go on the wire canonical
      std::memcpy(pay + 4 * (i * s.r + k), &x, 4);
    }
  std::memset(pay + l.p_bytes, 0, l.q_offset - l.p_bytes);
  std::memset(pay + l.q_offset + l.q_bytes, 0, l.total - l.q_offset - l.q_bytes);
  psgd_codec_q(src, ptm, s, scratch, psgd_q_out_codec{pay + l.q_offset, s.r, qt, w.ld}, c.threads);

  if constexpr (!std::is_same_v<Sink, psgd_no_sink>)
    psgd_compute_out(psgd_qt_direct{qt, w.ld}, psgd_prow_mat{ptm, s.r}, sink, s.rows, s.cols, s.r,
                     c.threads);
  c.hdr.count = s.rows;
  c.hdr.group = s.r;
  c.hdr.param = c.spec.eps;
  c.hdr.payload_bytes = l.total;
  return {};
}

//! Dense frame: the n values as f32 exactly as read (with feedback: p = g + e, and the
//! residual becomes p - p).
inline status psgd_encode_dense(const detail::encode_call& c, const psgd_shape& s,
                                tensor_view residual) {
  const std::uint64_t n = c.in.n;
  const blocks::powersgd_layout l = blocks::powersgd_layout_of(s.rows, s.cols, 0);
  auto* out = reinterpret_cast<float*>(c.payload);
  const std::uint64_t tasks = blocks::ceil_div(n, stream_grain);
  std::atomic<bool> nonfinite{false};
  parallel_for(threads_for(c.threads, tasks), tasks, [&](std::uint64_t t) {
    const std::uint64_t begin = t * stream_grain, end = std::min(n, begin + stream_grain);
    mask16 bad = 0;
    for (std::uint64_t i = begin; i < end; i += 16) {
      const auto cnt = static_cast<unsigned>(std::min<std::uint64_t>(16, end - i));
      vf16 v = psgd_load_any(c.in.data, c.in.type, i, cnt);
      if (residual.data != nullptr) {
        v = vadd_nan_first(v, psgd_load_any(residual.data, residual.type, i, cnt));
        psgd_store_any(residual.data, residual.type, i, v - v, cnt);
      }
      bad |= vnonfinite(v);
      psgd_store(out + i, v, cnt);
    }
    if (bad) nonfinite.store(true, std::memory_order_relaxed);
  });
  std::memset(c.payload + l.p_bytes, 0, l.total - l.p_bytes);
  if (nonfinite.load()) c.hdr.flags |= flag_nonfinite;
  c.hdr.count = s.rows;
  c.hdr.group = 0;
  c.hdr.param = 0.0f;
  c.hdr.payload_bytes = l.total;
  return {};
}

inline status powersgd_encode(const detail::encode_call& c) {
  if (c.in.n == 0) {
    c.hdr.payload_bytes = 0;
    return {};
  }
  const psgd_shape s = psgd_shape_of(c.spec, c.in);
  if (blocks::powersgd_layout_of(s.rows, s.cols, s.r).total > c.capacity) return too_small();
  if (s.r == 0) return psgd_encode_dense(c, s, {});
  const psgd_src_view src{c.in.data, c.in.type, s.cols};
  return psgd_encode_compressed(c, s, src, src, psgd_no_sink{});
}

inline status powersgd_encode_feedback(const detail::feedback_call& f) {
  const detail::encode_call& c = f.enc;
  if (c.in.n == 0) {
    c.hdr.payload_bytes = 0;
    return {};
  }
  const psgd_shape s = psgd_shape_of(c.spec, c.in);
  if (blocks::powersgd_layout_of(s.rows, s.cols, s.r).total > c.capacity) return too_small();
  if (s.r == 0) return psgd_encode_dense(c, s, f.residual);
  if (f.residual.type == dtype::f32) {
    // The first pass stores M = g + e into the residual; the others read it from there.
    const psgd_src_sum<true> src1{c.in.data, c.in.type, f.residual.data, dtype::f32, s.cols, false};
    const psgd_src_f32 src{static_cast<const float*>(f.residual.data), s.cols};
    const psgd_sink_feedback<psgd_src_f32> sink{src, f.residual, s.cols};
    return psgd_encode_compressed(c, s, src1, src, sink);
  }
  const psgd_src_sum<false> src{c.in.data,       c.in.type, f.residual.data,
                                f.residual.type, s.cols,    false};
  const psgd_sink_feedback<psgd_src_sum<false>> sink{src, f.residual, s.cols};
  return psgd_encode_compressed(c, s, src, src, sink);
}

inline status powersgd_decode(const detail::decode_call& c) {
  // peek() has checked rows | n, r <= min(64, rows, cols) and the payload size; every f32
  // bit pattern is a valid value, so nothing in the payload can index out of range.
  const std::uint64_t n = c.hdr.n;
  if (n == 0) return {};
  const std::uint64_t rows = c.hdr.count, cols = n / rows;
  const std::uint32_t r = c.hdr.group;
  const psgd_sink_decode sink{c.out, cols, c.alpha, c.accumulate};
  if (r == 0) {
    const std::uint64_t tasks = blocks::ceil_div(n, stream_grain);
    parallel_for(threads_for(c.threads, tasks), tasks, [&](std::uint64_t t) {
      const std::uint64_t begin = t * stream_grain, end = std::min(n, begin + stream_grain);
      alignas(64) float v[16];
      for (std::uint64_t i = begin; i < end; i += 16) {
        const auto cnt = static_cast<unsigned>(std::min<std::uint64_t>(16, end - i));
        std::memcpy(v, c.payload + 4 * i, 4 * cnt);
        sink(0, i, cnt, vload_n(v, cnt));
      }
    });
    return {};
  }
  const blocks::powersgd_layout l = blocks::powersgd_layout_of(rows, cols, r);
  psgd_compute_out(psgd_qt_rows<true>{c.payload + l.q_offset},
                   psgd_prow_bytes{c.payload + l.p_offset, r}, sink, rows, cols, r, c.threads);
  return {};
}

// ---- The phase API's kernels (contract/powersgd_kernels.hpp) -----------------------------------
// The public functions in src/powersgd.cpp check every argument and then call these.

inline bool psgd_phase_nonfinite(const_tensor_view grad, const float* residual) {
  const std::uint64_t n = grad.n;
  const std::uint64_t tasks = blocks::ceil_div(n, stream_grain);
  std::atomic<bool> bad{false};
  parallel_for(threads_for(0, tasks), tasks, [&](std::uint64_t t) {
    const std::uint64_t begin = t * stream_grain, end = std::min(n, begin + stream_grain);
    mask16 m = 0;
    for (std::uint64_t i = begin; i < end; i += 16) {
      const auto cnt = static_cast<unsigned>(std::min<std::uint64_t>(16, end - i));
      const vf16 g = psgd_load_any(grad.data, grad.type, i, cnt);
      m |= vnonfinite(g) | vnonfinite(psgd_load(residual + i, cnt) + g);
    }
    if (m != 0) bad.store(true, std::memory_order_relaxed);
  });
  return bad.load();
}

inline void psgd_phase_compute_p(const_tensor_view grad, float* residual, const float* q, float* p,
                                 std::uint64_t rows, std::uint64_t cols, std::uint32_t r) {
  if (rows * cols == 0) return;
  const psgd_src_sum<true> src{grad.data, grad.type, residual, dtype::f32, cols, true};
  psgd_compute_p<false>(src, psgd_qt_rows<false>{q}, rows, cols, r, {p, r, 1}, 0);
}

inline void psgd_phase_orthogonalize(float* a, std::uint64_t rows, std::uint32_t r, float eps) {
  psgd_orthogonalize({a, r, 1}, rows, r, eps);
}

//! Q output of the phase API: row-major cols x r.
struct psgd_q_out_rows {
  float* q;
  std::uint32_t r;
  GRADCODEC_PSGD_INLINE void operator()(std::uint32_t c, std::uint64_t j, unsigned cnt,
                                        vf16 v) const {
    alignas(64) float t[16];
    vstore(t, v);
    for (unsigned l = 0; l < cnt; ++l) q[(j + l) * r + c] = t[l];
  }
};

//! 32768 floats: 128 KiB of stack per task, blocks of up to 896 columns for rank 4 and 4096
//! rows, against 448 with 16384 (BM_phase_compute_q/1 on the AVX2 VM 19.2-23.8 -> 16.6-20.6
//! ms); 65536 measured no faster (docs/performance-log.md, "PowerSGD's phase Q pass").
inline void psgd_phase_compute_q(const float* m, std::uint64_t rows, std::uint64_t cols,
                                 const float* p, std::uint32_t r, float* q) {
  if (rows * cols == 0) return;
  psgd_compute_q_bounded<32768>(psgd_src_f32{m, cols}, psgd_mat{const_cast<float*>(p), r, 1}, rows,
                                cols, r, psgd_q_out_rows{q, r});
}

inline void psgd_phase_finish(const float* p, float* q, std::uint64_t rows, std::uint64_t cols,
                              std::uint32_t r, int world, bool ef, float* residual,
                              tensor_view out) {
  const float w = static_cast<float>(world);
  for (std::uint64_t k = 0; k < cols * r; ++k) q[k] = q[k] / w;
  if (rows * cols == 0) return;
  psgd_compute_out(psgd_qt_rows<false>{q}, psgd_prow_mat{{const_cast<float*>(p), r, 1}, r},
                   psgd_sink_finish{residual, out, cols, ef}, rows, cols, r, 0);
}

//! The phase kernels of this ISA. Not inline: src/powersgd.cpp calls it by name (the table
//! is built once per ISA namespace, like table()).
const detail::powersgd_kernels* powersgd_phase_kernels() noexcept {
  static const detail::powersgd_kernels k{GRADCODEC_CPU_NAME,   psgd_phase_nonfinite,
                                          psgd_phase_compute_p, psgd_phase_orthogonalize,
                                          psgd_phase_compute_q, psgd_phase_finish};
  return &k;
}

// This family's rows of the variant's table (cpu/ops-inl.hpp).
GRADCODEC_CPU_CODEC_ROW(powersgd);
