// SPDX-License-Identifier: Apache-2.0
//! @file
//! What the Google Benchmark micro benchmarks share: the tensor size and its Gaussian
//! values, the bytes/s counter, CPU backend options and the memory baselines.
#pragma once

#include <benchmark/benchmark.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "gradcodec/gradcodec.hpp"

namespace gradcodec::micro {

//! Elements of the benchmark tensor: 2^26, or GRADCODEC_BENCH_N.
inline std::size_t bench_n() {
  const char* s = std::getenv("GRADCODEC_BENCH_N");
  return s ? static_cast<std::size_t>(std::strtoull(s, nullptr, 10)) : std::size_t{1} << 26;
}

//! n Gaussian values times scale (Box-Muller over a 64-bit LCG whose state starts at
//! `state`).
inline std::vector<float> gaussian(std::size_t n, std::uint64_t state, float scale = 1.0f) {
  std::vector<float> out(n);
  auto next = [&] {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return (static_cast<double>(state >> 11) + 0.5) * 0x1p-53;
  };
  for (auto& x : out)
    x = scale * static_cast<float>(std::sqrt(-2.0 * std::log(next())) *
                                   std::cos(6.283185307179586 * next()));
  return out;
}

//! The benchmark tensor: bench_n() Gaussian values, generated once.
inline const std::vector<float>& data() {
  static const std::vector<float> v = gaussian(bench_n(), 0x9E3779B97F4A7C15ull);
  return v;
}

inline double n_elems() { return static_cast<double>(data().size()); }

//! Reports `bytes` per iteration as the benchmark's bytes/s.
inline void set_bytes(benchmark::State& state, double bytes) {
  state.SetBytesProcessed(
      static_cast<std::int64_t>(bytes * static_cast<double>(state.iterations())));
}

//! The CPU backend with `threads` threads and no workspace.
inline exec_options cpu_options(int threads = 1) {
  exec_options opt;
  opt.where = backend::cpu;
  opt.threads = threads;
  return opt;
}

//! The CPU backend with `threads` threads and a workspace, held in ws, sized for op on shape.
inline exec_options cpu_options(std::vector<std::byte>& ws, const codec_spec& spec,
                                const_tensor_view shape, operation op, int threads = 1) {
  exec_options opt = cpu_options(threads);
  ws.resize(workspace_size(spec, shape, op, opt).value());
  opt.workspace = ws;
  return opt;
}

// ---- Timed loops -------------------------------------------------------------------------

//! Times encode of data() (context {1, 0, 0}) with opt.
inline void time_encode(benchmark::State& state, const codec_spec& spec, const exec_options& opt) {
  std::vector<std::byte> out(encode_bound(spec, data().size()));
  for (auto _ : state) {
    auto w = encode(spec, {1, 0, 0}, view(data()), out, opt);
    if (!w.ok()) state.SkipWithError(w.error().message());
    benchmark::ClobberMemory();
  }
}

//! Times encode_with_feedback of data() (context {1, 0, 0}) with opt, the residual zero at
//! the start.
inline void time_encode_feedback(benchmark::State& state, const codec_spec& spec,
                                 const exec_options& opt) {
  std::vector<std::byte> out(encode_bound(spec, data().size()));
  std::vector<float> residual(data().size(), 0.0f);
  for (auto _ : state) {
    auto w = encode_with_feedback(spec, {1, 0, 0}, view(data()), view(residual), out, opt);
    if (!w.ok()) state.SkipWithError(w.error().message());
    benchmark::ClobberMemory();
  }
}

// ---- Memory baselines --------------------------------------------------------------------

//! A memcpy of x: 8 bytes per element (read and write).
inline void memcpy_baseline(benchmark::State& state, const std::vector<float>& x) {
  std::vector<float> y(x.size());
  for (auto _ : state) {
    std::memcpy(y.data(), x.data(), x.size() * 4);
    benchmark::ClobberMemory();
  }
  set_bytes(state, 8.0 * static_cast<double>(x.size()));
}

//! One read pass over x with integer adds (vectorised, bandwidth-bound): 4 bytes per element.
inline void read_pass_baseline(benchmark::State& state, const std::vector<float>& x) {
  std::vector<std::uint32_t> bits(x.size());
  std::memcpy(bits.data(), x.data(), x.size() * 4);
  for (auto _ : state) {
    std::uint32_t acc = 0;
    for (std::uint32_t b : bits) acc += b;
    benchmark::DoNotOptimize(acc);
  }
  set_bytes(state, 4.0 * static_cast<double>(x.size()));
}

}  // namespace gradcodec::micro
