// SPDX-License-Identifier: Apache-2.0
// Sign codecs on the CPU backend (docs/performance.md, "CPU backend (measured)"): sign (scale none,
// mean, l2) and onebit encode, fused error feedback, decode and decode-accumulate, against a
// memcpy and a read pass of the same tensor and a two-pass scaled sign like BytePS's onebit
// compressor (one pass for the scale over the whole tensor, one to pack). One thread;
// n = 2^26 f32 (GRADCODEC_BENCH_N overrides). Bytes/s follow the bytes model of
// performance.md and are per CPU second of the benchmark thread (on an idle machine the same
// as per wall second; on a shared one closer to what the code can do).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "gradcodec/cpu.hpp"
#include "gradcodec/gradcodec.hpp"
#include "micro_common.hpp"

namespace gc = gradcodec;

namespace {

using namespace gc::micro;

//! Payload bytes per element beyond the bits: S f32 scales per bucket of B.
double scale_bytes(const gc::codec_spec& spec) {
  return (spec.id == gc::codec_id::onebit ? 8.0 : 4.0) / static_cast<double>(spec.bucket);
}

// ---- Memory baselines ------------------------------------------------------------------

void BM_memcpy(benchmark::State& state) { memcpy_baseline(state, data()); }

void BM_read_pass(benchmark::State& state) { read_pass_baseline(state, data()); }

// ---- Two-pass baseline (BytePS onebit with scaling) --------------------------------------
// Pass 1: scale = sum |x| / n in double over the whole tensor; pass 2: 64 sign bits per
// word, most significant first. The tensor is read from memory twice.

float two_pass_scale(const float* x, std::size_t n) {
  // Independent partial sums, as the OpenMP simd reduction BytePS asks for: this pass is
  // bandwidth-bound, not bound by the latency of one add chain.
  double part[8] = {};
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (std::size_t k = 0; k < 8; ++k) part[k] += std::fabs(x[i + k]);
  for (; i < n; ++i) part[0] += std::fabs(x[i]);
  double sum = 0.0;
  for (double p : part) sum += p;
  return static_cast<float>(sum / static_cast<double>(n));
}

void two_pass_pack(const float* x, std::size_t n, std::uint64_t* words) {
  for (std::size_t w = 0; w < n / 64; ++w) {
    std::uint64_t bits = 0;
    for (std::size_t j = 0; j < 64; ++j) bits = (bits << 1) | (x[64 * w + j] < 0.0f ? 1u : 0u);
    words[w] = bits;
  }
}

void BM_two_pass_encode(benchmark::State& state) {
  const auto& x = data();
  std::vector<std::uint64_t> words(x.size() / 64 + 1);
  for (auto _ : state) {
    const float scale = two_pass_scale(x.data(), x.size());
    two_pass_pack(x.data(), x.size(), words.data());
    std::memcpy(&words.back(), &scale, 4);
    benchmark::ClobberMemory();
  }
  set_bytes(state, 4.0 * n_elems() + n_elems() / 8);
}

//! Error feedback as BytePS runs it: p = g + e in place, the scale pass, then one pass that
//! packs and writes e = p -/+ scale.
void BM_two_pass_feedback(benchmark::State& state) {
  const auto& g = data();
  const std::size_t n = g.size();
  std::vector<float> e(n, 0.0f);
  std::vector<std::uint64_t> words(n / 64 + 1);
  for (auto _ : state) {
    for (std::size_t i = 0; i < n; ++i) e[i] = g[i] + e[i];
    const float scale = two_pass_scale(e.data(), n);
    for (std::size_t w = 0; w < n / 64; ++w) {
      std::uint64_t bits = 0;
      for (std::size_t j = 0; j < 64; ++j) {
        float& p = e[64 * w + j];
        const bool neg = p < 0.0f;
        bits = (bits << 1) | (neg ? 1u : 0u);
        p = p - (neg ? -scale : scale);
      }
      words[w] = bits;
    }
    benchmark::ClobberMemory();
  }
  set_bytes(state, 12.0 * n_elems() + n_elems() / 8);
}

// ---- gradcodec ---------------------------------------------------------------------------

void BM_encode(benchmark::State& state, const std::string& text) {
  const auto spec = gc::parse_spec(text).value();
  time_encode(state, spec, cpu_options());
  // Read every value; write one bit per value and the scales.
  set_bytes(state, n_elems() * (4.0 + 1.0 / 8 + scale_bytes(spec)));
}

void BM_encode_feedback(benchmark::State& state, const std::string& text) {
  const auto spec = gc::parse_spec(text).value();
  time_encode_feedback(state, spec, cpu_options());
  // Read g and e, write e, write the payload.
  set_bytes(state, n_elems() * (12.0 + 1.0 / 8 + scale_bytes(spec)));
}

void BM_decode(benchmark::State& state, const std::string& text, bool accumulate) {
  const auto spec = gc::parse_spec(text).value();
  const auto opt = cpu_options();
  std::vector<std::byte> frame(gc::encode_bound(spec, data().size()));
  frame.resize(gc::encode(spec, {1, 1, 0}, gc::view(data()), frame, opt).value());
  std::vector<float> out(data().size(), 0.0f);
  for (auto _ : state) {
    auto st = accumulate ? gc::decode_accumulate(frame, gc::view(out), 0.5f, opt)
                         : gc::decode(frame, gc::view(out), opt);
    if (!st.ok()) state.SkipWithError(st.message());
    benchmark::ClobberMemory();
  }
  // The payload read; n outputs written (and read when accumulating).
  set_bytes(state, n_elems() * (1.0 / 8 + scale_bytes(spec) + (accumulate ? 8.0 : 4.0)));
}

//! signSGD majority vote of `voters` sign:scale=mean frames (the comm layer's majority_vote
//! strategy after its allgather): each voter's gradient is the data rotated by a different
//! offset, so the votes disagree as real ranks' do. Reads the frames, writes n f32 values.
//! Arguments: voters, threads, and the output's offset in bytes from a 64-byte boundary (a
//! torch tensor's buffer is aligned; an offset one is written without streaming stores).
void BM_majority_vote(benchmark::State& state) {
  const auto voters = static_cast<std::size_t>(state.range(0));
  gc::set_cpu_default_threads(static_cast<int>(state.range(1)));
  const auto spec = gc::parse_spec("sign:scale=mean").value();
  const std::vector<float>& x = data();
  std::vector<std::vector<std::byte>> frames;
  std::vector<float> rotated(x.size());
  for (std::size_t v = 0; v < voters; ++v) {
    const std::size_t shift = (v * 7919) % x.size();
    std::copy(x.begin() + static_cast<std::ptrdiff_t>(shift), x.end(), rotated.begin());
    std::copy(x.begin(), x.begin() + static_cast<std::ptrdiff_t>(shift),
              rotated.end() - static_cast<std::ptrdiff_t>(shift));
    std::vector<std::byte> f(gc::encode_bound(spec, x.size()));
    f.resize(gc::encode(spec, {1, 1, 0}, gc::view(rotated), f, cpu_options()).value());
    frames.push_back(std::move(f));
  }
  const std::vector<gc::const_bytes> views(frames.begin(), frames.end());
  std::vector<float> storage(x.size() + 32, 0.0f);
  float* base = storage.data();
  while (reinterpret_cast<std::uintptr_t>(base) % 64 != 0) ++base;
  const std::span<float> out(base + state.range(2) / 4, x.size());
  for (auto _ : state) {
    if (auto st = gc::sign_majority_vote(views, gc::view(out), 0.25f); !st.ok())
      state.SkipWithError(st.message());
    benchmark::ClobberMemory();
  }
  gc::set_cpu_default_threads(0);
  set_bytes(state, n_elems() * (4.0 + static_cast<double>(voters) / 8));
}

const char* const kSpecs[] = {"sign", "sign:scale=mean", "sign:scale=l2", "onebit"};

int register_all() {
  benchmark::RegisterBenchmark("memcpy", BM_memcpy)->Unit(benchmark::kMillisecond);
  benchmark::RegisterBenchmark("read_pass", BM_read_pass)->Unit(benchmark::kMillisecond);
  benchmark::RegisterBenchmark("two_pass_scaled_sign/encode", BM_two_pass_encode)
      ->Unit(benchmark::kMillisecond);
  benchmark::RegisterBenchmark("two_pass_scaled_sign/feedback", BM_two_pass_feedback)
      ->Unit(benchmark::kMillisecond);
  benchmark::RegisterBenchmark("majority_vote", BM_majority_vote)
      ->Args({4, 1, 0})
      ->Args({16, 1, 0})
      ->Args({4, 2, 0})
      ->Args({16, 2, 0})
      ->Args({4, 1, 4})
      ->Args({4, 2, 4})
      ->Unit(benchmark::kMillisecond);
  for (const char* s : kSpecs) {
    const std::string name(s);
    benchmark::RegisterBenchmark((name + "/encode").c_str(), BM_encode, name)
        ->Unit(benchmark::kMillisecond);
    benchmark::RegisterBenchmark((name + "/feedback").c_str(), BM_encode_feedback, name)
        ->Unit(benchmark::kMillisecond);
    benchmark::RegisterBenchmark((name + "/decode").c_str(), BM_decode, name, false)
        ->Unit(benchmark::kMillisecond);
    benchmark::RegisterBenchmark((name + "/accumulate").c_str(), BM_decode, name, true)
        ->Unit(benchmark::kMillisecond);
  }
  return 0;
}
const int registered = register_all();

}  // namespace

BENCHMARK_MAIN();
