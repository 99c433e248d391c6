// SPDX-License-Identifier: Apache-2.0
// The selecting codecs on the CPU backend, the sparse family and random-k (docs/performance.md,
// "CPU backend (measured)"): exact top-k, DGC, threshold and random-k encode, fused error
// feedback, decode and decode-accumulate, against a memcpy and a read pass of the same tensor
// and two top-k baselines (std::nth_element over |x|, and a binary min-heap like BytePS's).
// One thread; n = 2^26 f32 (GRADCODEC_BENCH_N overrides). Bytes/s follow the bytes model of
// performance.md.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "gradcodec/gradcodec.hpp"
#include "micro_common.hpp"

namespace gc = gradcodec;

namespace {

using namespace gc::micro;

std::uint64_t k_of(double ratio) {
  return std::max<std::uint64_t>(1, static_cast<std::uint64_t>(ratio * n_elems()));
}

// ---- Memory baselines ------------------------------------------------------------------

void BM_memcpy(benchmark::State& state) { memcpy_baseline(state, data()); }

void BM_read_pass(benchmark::State& state) { read_pass_baseline(state, data()); }

// ---- Top-k baselines -------------------------------------------------------------------

void BM_nth_element(benchmark::State& state) {
  const auto& x = data();
  const std::uint64_t k = k_of(static_cast<double>(state.range(0)) * 1e-4);
  std::vector<float> a(x.size());
  for (auto _ : state) {
    state.PauseTiming();
    for (std::size_t i = 0; i < x.size(); ++i) a[i] = std::fabs(x[i]);
    state.ResumeTiming();
    std::nth_element(a.begin(), a.begin() + static_cast<std::ptrdiff_t>(k - 1), a.end(),
                     std::greater<float>());
    benchmark::DoNotOptimize(a.data());
  }
  set_bytes(state, 4.0 * n_elems() + 8.0 * static_cast<double>(k));
}

//! BytePS's CPU top-k: a binary min-heap of (index, |value|) that a new element enters only
//! when strictly larger than the heap's minimum.
void BM_heap_topk(benchmark::State& state) {
  const auto& x = data();
  const std::uint64_t k = k_of(static_cast<double>(state.range(0)) * 1e-4);
  std::vector<std::pair<float, std::uint32_t>> heap(k);
  auto sift_down = [&](std::size_t i) {
    for (;;) {
      std::size_t m = i;
      const std::size_t l = 2 * i + 1, r = l + 1;
      if (l < k && heap[l].first < heap[m].first) m = l;
      if (r < k && heap[r].first < heap[m].first) m = r;
      if (m == i) return;
      std::swap(heap[i], heap[m]);
      i = m;
    }
  };
  for (auto _ : state) {
    for (std::uint32_t i = 0; i < k; ++i) heap[i] = {std::fabs(x[i]), i};
    for (std::size_t i = k / 2; i-- > 0;) sift_down(i);
    for (std::size_t i = k; i < x.size(); ++i) {
      const float a = std::fabs(x[i]);
      if (a > heap[0].first) {
        heap[0] = {a, static_cast<std::uint32_t>(i)};
        sift_down(0);
      }
    }
    benchmark::DoNotOptimize(heap.data());
  }
  set_bytes(state, 4.0 * n_elems() + 8.0 * static_cast<double>(k));
}

// ---- gradcodec ---------------------------------------------------------------------------

//! Bytes model of an encode (docs/performance.md): what the codec must read and write.
double encode_bytes(const gc::codec_spec& spec, std::uint64_t sent) {
  const double n = n_elems(), m = static_cast<double>(sent);
  if (spec.id == gc::codec_id::randomk) return 8.0 * m;  // the k values read, k written
  return 4.0 * n + 8.0 * m;                              // read all, values + u32 indices
}

void BM_encode(benchmark::State& state, const std::string& text) {
  const auto spec = gc::parse_spec(text).value();
  std::vector<std::byte> ws;
  const auto opt = cpu_options(ws, spec, gc::view(data()), gc::operation::encode);
  std::vector<std::byte> out(gc::encode_bound(spec, data().size()));
  std::uint64_t count = 0;
  gc::context ctx{1, 0, 0};
  for (auto _ : state) {
    ++ctx.step;
    auto w = gc::encode(spec, ctx, gc::view(data()), out, opt);
    if (!w.ok()) state.SkipWithError(w.error().message());
    count = gc::peek(out).value().count;
  }
  state.counters["sent"] = static_cast<double>(count);
  set_bytes(state, encode_bytes(spec, count));
}

void BM_encode_feedback(benchmark::State& state, const std::string& text) {
  const auto spec = gc::parse_spec(text).value();
  std::vector<std::byte> ws;
  const auto opt = cpu_options(ws, spec, gc::view(data()), gc::operation::encode_with_feedback);
  std::vector<std::byte> out(gc::encode_bound(spec, data().size()));
  std::vector<float> residual(data().size(), 0.0f);
  std::uint64_t count = 0;
  gc::context ctx{1, 0, 0};
  for (auto _ : state) {
    ++ctx.step;
    auto w = gc::encode_with_feedback(spec, ctx, gc::view(data()), gc::view(residual), out, opt);
    if (!w.ok()) state.SkipWithError(w.error().message());
    count = gc::peek(out).value().count;
  }
  // Read g and e, write e, write the payload.
  set_bytes(state, 12.0 * n_elems() + 8.0 * static_cast<double>(count));
}

void BM_decode(benchmark::State& state, const std::string& text, bool accumulate) {
  const auto spec = gc::parse_spec(text).value();
  std::vector<std::byte> ws;
  const auto opt = cpu_options(ws, spec, gc::view(data()), gc::operation::encode);
  std::vector<std::byte> frame(gc::encode_bound(spec, data().size()));
  frame.resize(gc::encode(spec, {1, 1, 0}, gc::view(data()), frame, opt).value());
  const std::uint64_t k = gc::peek(frame).value().count;
  std::vector<float> out(data().size(), 0.0f);
  const auto dopt = cpu_options();
  for (auto _ : state) {
    auto st = accumulate ? gc::decode_accumulate(frame, gc::view(out), 0.5f, dopt)
                         : gc::decode(frame, gc::view(out), dopt);
    if (!st.ok()) state.SkipWithError(st.message());
    benchmark::ClobberMemory();
  }
  const double n = n_elems(), payload = static_cast<double>(frame.size());
  // decode: payload read, n outputs written; accumulate: payload read, k outputs read and written.
  set_bytes(state, accumulate ? payload + 8.0 * static_cast<double>(k) : payload + 4.0 * n);
}

void register_all() {
  benchmark::RegisterBenchmark("memcpy", BM_memcpy)->Unit(benchmark::kMillisecond);
  benchmark::RegisterBenchmark("read_pass", BM_read_pass)->Unit(benchmark::kMillisecond);
  // range(0): k per 10^4 elements.
  benchmark::RegisterBenchmark("nth_element_abs", BM_nth_element)
      ->Arg(100)
      ->Arg(10)
      ->Unit(benchmark::kMillisecond)
      ->UseRealTime();
  benchmark::RegisterBenchmark("heap_topk_byteps", BM_heap_topk)
      ->Arg(100)
      ->Arg(10)
      ->Unit(benchmark::kMillisecond);
  for (const char* s : {"topk:ratio=0.01", "topk:ratio=0.001", "dgc:ratio=0.01", "dgc:ratio=0.001",
                        "threshold:tau=2.576", "randomk:ratio=0.01", "randomk:ratio=0.001"})
    benchmark::RegisterBenchmark((std::string("encode/") + s).c_str(), BM_encode, std::string(s))
        ->Unit(benchmark::kMillisecond);
  for (const char* s :
       {"topk:ratio=0.01", "dgc:ratio=0.001", "randomk:ratio=0.01", "threshold:tau=2.576"})
    benchmark::RegisterBenchmark((std::string("feedback/") + s).c_str(), BM_encode_feedback,
                                 std::string(s))
        ->Unit(benchmark::kMillisecond);
  for (const char* s : {"topk:ratio=0.01", "randomk:ratio=0.01"}) {
    benchmark::RegisterBenchmark((std::string("decode/") + s).c_str(), BM_decode, std::string(s),
                                 false)
        ->Unit(benchmark::kMillisecond);
    benchmark::RegisterBenchmark((std::string("decode_acc/") + s).c_str(), BM_decode,
                                 std::string(s), true)
        ->Unit(benchmark::kMillisecond);
  }
}

}  // namespace

int main(int argc, char** argv) {
  register_all();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
