// SPDX-License-Identifier: Apache-2.0
//! @file
//! The baselines of `gradcodec bench` (baselines.hpp), one function each.
#include "baselines.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

namespace gradcodec::tool {
namespace {

volatile float g_sink = 0;  // keeps the read-only sum from being optimized away

record baseline_row(std::uint64_t n, const std::string& codec, const std::string& op,
                    const timing& t, double bytes_per_element) {
  record r;
  r.codec = codec;
  r.backend = "baseline";
  r.isa = "-";
  r.threads = 1;
  r.n = n;
  r.op = op;
  r.ratio = 1.0;
  r.median_s = t.median_s;
  r.runs = t.runs;
  r.bytes_per_element = bytes_per_element;
  return r;
}

void baseline_memcpy(run_state& st, host_memory& mem) {
  const std::uint64_t n = mem.n();
  const timing t = host_clock{}.time(st.min_runs, [&] {
    std::memcpy(mem.out(), mem.x.data(), n * sizeof(float));
    return true;
  });
  st.memcpy_gbps = 8.0 * static_cast<double>(n) / t.median_s * 1e-9;
  st.add(baseline_row(n, "none", "memcpy", t, 8.0));
}

void baseline_sum(run_state& st, const host_memory& mem) {
  const std::uint64_t n = mem.n();
  const auto& x = mem.x;
  const timing t = host_clock{}.time(st.min_runs, [&] {
    std::array<float, 16> part{};
    std::uint64_t i = 0;
    for (; i + 16 <= n; i += 16)
      for (std::size_t j = 0; j < 16; ++j) part[j] += x[i + j];
    float s = 0;
    for (; i < n; ++i) s += x[i];
    for (const float p : part) s += p;
    g_sink = s;
    return true;
  });
  st.add(baseline_row(n, "none", "sum", t, 4.0));
}

//! Top-k by magnitude with k as topk's default ratio 0.01, output as (index, value) pairs:
//! what the two selections share.
struct topk_baseline {
  static constexpr const char* spec = "topk:ratio=0.01";
  const host_memory::floats& x;
  std::uint64_t n = x.size();
  std::uint64_t k = std::max<std::uint64_t>(1, n / 100);
  std::vector<std::uint32_t> idx = std::vector<std::uint32_t>(k);
  std::vector<float> val = std::vector<float>(k);

  //! The row of a selection's timing, with the error of keeping the selected (the dropped
  //! elements' share).
  record row(const char* op, const timing& t) const {
    std::vector<float> dropped(x.begin(), x.end());
    for (std::uint64_t j = 0; j < k; ++j) dropped[idx[j]] = 0.0f;
    double e2 = 0, r2 = 0;
    for (std::uint64_t i = 0; i < n; ++i) {
      e2 += static_cast<double>(dropped[i]) * dropped[i];
      r2 += static_cast<double>(x[i]) * x[i];
    }
    record r =
        baseline_row(n, spec, op, t, 4.0 + 8.0 * static_cast<double>(k) / static_cast<double>(n));
    r.ratio = 4.0 * static_cast<double>(n) / (8.0 * static_cast<double>(k));
    r.rel_error = r2 > 0 ? std::sqrt(e2 / r2) : 0.0;
    return r;
  }
};

void baseline_nth_element_topk(run_state& st, const host_memory& mem) {
  topk_baseline tk{mem.x};
  const auto& x = mem.x;
  const std::uint64_t n = tk.n, k = tk.k;
  std::vector<float> mags(n);
  const timing t = host_clock{}.time(st.min_runs, [&] {
    for (std::uint64_t i = 0; i < n; ++i) mags[i] = std::fabs(x[i]);
    std::nth_element(mags.begin(), mags.begin() + static_cast<std::ptrdiff_t>(n - k), mags.end());
    const float thr = mags[n - k];
    std::uint64_t m = 0;
    for (std::uint64_t i = 0; i < n && m < k; ++i)
      if (std::fabs(x[i]) > thr) {
        tk.idx[m] = static_cast<std::uint32_t>(i);
        tk.val[m++] = x[i];
      }
    for (std::uint64_t i = 0; i < n && m < k; ++i)
      if (std::fabs(x[i]) == thr) {
        tk.idx[m] = static_cast<std::uint32_t>(i);
        tk.val[m++] = x[i];
      }
    return true;
  });
  st.add(tk.row("nth_element_topk", t));
}

//! BytePS: a min-heap of the k largest magnitudes, the top replaced only when strictly greater.
void baseline_heap_topk(run_state& st, const host_memory& mem) {
  topk_baseline tk{mem.x};
  const auto& x = mem.x;
  const std::uint64_t n = tk.n, k = tk.k;
  std::vector<std::pair<float, std::uint32_t>> heap;
  heap.reserve(k);
  const auto greater = [](const auto& a, const auto& c) { return a.first > c.first; };
  const timing t = host_clock{}.time(st.min_runs, [&] {
    heap.clear();
    for (std::uint64_t i = 0; i < k; ++i)
      heap.emplace_back(std::fabs(x[i]), static_cast<std::uint32_t>(i));
    std::make_heap(heap.begin(), heap.end(), greater);
    for (std::uint64_t i = k; i < n; ++i) {
      const float a = std::fabs(x[i]);
      if (a > heap.front().first) {
        std::pop_heap(heap.begin(), heap.end(), greater);
        heap.back() = {a, static_cast<std::uint32_t>(i)};
        std::push_heap(heap.begin(), heap.end(), greater);
      }
    }
    for (std::uint64_t j = 0; j < k; ++j) {
      tk.idx[j] = heap[j].second;
      tk.val[j] = x[heap[j].second];
    }
    return true;
  });
  st.add(tk.row("heap_topk", t));
}

//! CGX: per bucket of 512, one pass for min/max, one to quantize to 4 bits (nearest).
void baseline_cgx_minmax4(run_state& st, host_memory& mem) {
  const auto& x = mem.x;
  const std::uint64_t n = mem.n();
  constexpr std::uint64_t bucket = 512;
  const std::uint64_t buckets = (n + bucket - 1) / bucket;
  std::vector<float> lo(buckets), hi(buckets);
  std::vector<std::uint8_t> packed((n + 1) / 2);
  const timing t = host_clock{}.time(st.min_runs, [&] {
    for (std::uint64_t g = 0; g < buckets; ++g) {
      const std::uint64_t e = std::min(n, (g + 1) * bucket);
      float mn = x[g * bucket], mx = mn;
      for (std::uint64_t i = g * bucket + 1; i < e; ++i) {
        mn = std::min(mn, x[i]);
        mx = std::max(mx, x[i]);
      }
      lo[g] = mn;
      hi[g] = mx;
    }
    std::fill(packed.begin(), packed.end(), std::uint8_t{0});
    for (std::uint64_t g = 0; g < buckets; ++g) {
      const std::uint64_t e = std::min(n, (g + 1) * bucket);
      const float range = hi[g] - lo[g];
      const float inv = range > 0 ? 15.0f / range : 0.0f;
      for (std::uint64_t i = g * bucket; i < e; ++i) {
        const auto q = static_cast<std::uint8_t>((x[i] - lo[g]) * inv + 0.5f);
        packed[i / 2] |= static_cast<std::uint8_t>(q << (4 * (i % 2)));
      }
    }
    return true;
  });
  float* out = mem.out();
  for (std::uint64_t i = 0; i < n; ++i) {
    const std::uint64_t g = i / bucket;
    const float q = static_cast<float>((packed[i / 2] >> (4 * (i % 2))) & 15);
    out[i] = lo[g] + q * ((hi[g] - lo[g]) / 15.0f);
  }
  const double frame_bytes = static_cast<double>(packed.size() + 8 * buckets);
  record r = baseline_row(n, "minmax:bits=4,bucket=512", "cgx_minmax4", t,
                          4.0 + frame_bytes / static_cast<double>(n));
  r.ratio = 4.0 * static_cast<double>(n) / frame_bytes;
  r.rel_error = rel_error(out, x);
  st.add(r);
}

}  // namespace

void run_baselines(run_state& st, host_memory& mem) {
  baseline_memcpy(st, mem);
  baseline_sum(st, mem);
  baseline_nth_element_topk(st, mem);
  baseline_heap_topk(st, mem);
  baseline_cgx_minmax4(st, mem);
}

}  // namespace gradcodec::tool
