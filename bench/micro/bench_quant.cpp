// SPDX-License-Identifier: Apache-2.0
// Bucketed quantizers on the CPU backend (docs/performance.md, "CPU backend (measured)"): qsgd,
// terngrad and minmax encode, fused error feedback, decode and decode-accumulate, against a memcpy
// of the same tensor, the 16-lane Philox alone (one number per element, the cost every
// stochastic rounding pays), and a plain-C QSGD as peers write it (GRACE/BytePS style: one
// pass for the bucket norms, one to quantize with a xorshift generator into one byte per
// level). n = 2^26 f32 (GRADCODEC_BENCH_N overrides); the thread count is the benchmark
// argument. Bytes/s follow the bytes model of performance.md.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "gradcodec/blocks/philox.hpp"
#include "gradcodec/gradcodec.hpp"
#include "micro_common.hpp"

namespace gc = gradcodec;

namespace {

using namespace gc::micro;

//! Payload bytes per element: the codes plus the scales of each bucket.
double payload_bytes(const gc::codec_spec& spec) {
  const auto n = static_cast<std::uint64_t>(n_elems());
  return static_cast<double>(gc::encode_bound(spec, n, gc::dtype::f32) - gc::header_bytes) /
         static_cast<double>(n);
}

// ---- Baselines --------------------------------------------------------------------------

void BM_memcpy(benchmark::State& state) { memcpy_baseline(state, data()); }

//! Philox4x32-10 for every element in plain C (counter_rng::block per 4 elements, as the
//! reference draws them): what stochastic rounding costs without the 16-lane generator.
//! The 16-lane generator's own cost is qsgd/encode minus qsgd:rounding=nearest/encode.
void BM_philox_scalar(benchmark::State& state) {
  const std::size_t n = data().size();
  const auto rng = gc::blocks::counter_rng::make(1, 2, 3);
  std::vector<std::uint32_t> out(n);
  for (auto _ : state) {
    for (std::size_t b = 0; b < n / 4; ++b) {
      const auto blk = rng.block(gc::blocks::rng_stream::rounding, b);
      std::memcpy(&out[4 * b], blk.v, 16);
    }
    benchmark::ClobberMemory();
  }
  set_bytes(state, 4.0 * n_elems());
}

//! QSGD as peers write it: bucket L2 norms in double (pass 1), then levels with a xorshift
//! Bernoulli draw, one int8 per element (pass 2). Not the library's wire format.
void BM_plain_qsgd(benchmark::State& state) {
  const auto& x = data();
  const std::size_t n = x.size(), bucket = 512, s = 7;
  std::vector<float> norms(n / bucket + 1);
  std::vector<std::int8_t> levels(n);
  for (auto _ : state) {
    for (std::size_t b = 0; b * bucket < n; ++b) {
      double sum = 0.0;
      for (std::size_t i = b * bucket; i < std::min(n, (b + 1) * bucket); ++i)
        sum += double(x[i]) * x[i];
      norms[b] = static_cast<float>(std::sqrt(sum));
    }
    std::uint64_t r = 88172645463325252ull;
    for (std::size_t i = 0; i < n; ++i) {
      r ^= r << 13;
      r ^= r >> 7;
      r ^= r << 17;
      const float norm = norms[i / bucket];
      const float level = norm > 0.0f ? std::fabs(x[i]) / norm * static_cast<float>(s) : 0.0f;
      const float fl = std::floor(level);
      const float u = static_cast<float>(r >> 40) * 0x1p-24f;
      const int l = static_cast<int>(fl) + (u < level - fl ? 1 : 0);
      levels[i] = static_cast<std::int8_t>(x[i] < 0.0f ? -l : l);
    }
    benchmark::ClobberMemory();
  }
  // Read x (once per pass: twice), write one byte per element.
  set_bytes(state, n_elems() * (8.0 + 1.0));
}

// ---- gradcodec ---------------------------------------------------------------------------

void BM_encode(benchmark::State& state, const std::string& text) {
  const auto spec = gc::parse_spec(text).value();
  time_encode(state, spec, cpu_options(static_cast<int>(state.range(0))));
  // Read every value; write the codes and the scales.
  set_bytes(state, n_elems() * (4.0 + payload_bytes(spec)));
}

void BM_encode_feedback(benchmark::State& state, const std::string& text) {
  const auto spec = gc::parse_spec(text).value();
  time_encode_feedback(state, spec, cpu_options(static_cast<int>(state.range(0))));
  // Read g and e, write e, write the payload.
  set_bytes(state, n_elems() * (12.0 + payload_bytes(spec)));
}

void BM_decode(benchmark::State& state, const std::string& text, bool accumulate) {
  const auto spec = gc::parse_spec(text).value();
  const auto opt = cpu_options(static_cast<int>(state.range(0)));
  std::vector<std::byte> frame(gc::encode_bound(spec, data().size()));
  frame.resize(gc::encode(spec, {1, 1, 0}, gc::view(data()), frame, opt).value());
  // 64-byte aligned, as framework tensors are (PyTorch's CPU allocator aligns to 64): large
  // aligned f32 outputs get streaming stores.
  const std::size_t n = data().size();
  std::vector<float> storage(n + 16, 0.0f);
  float* out =
      storage.data() + (64 - reinterpret_cast<std::uintptr_t>(storage.data()) % 64) % 64 / 4;
  const gc::tensor_view view{out, n, gc::dtype::f32};
  for (auto _ : state) {
    auto st =
        accumulate ? gc::decode_accumulate(frame, view, 0.5f, opt) : gc::decode(frame, view, opt);
    if (!st.ok()) state.SkipWithError(st.message());
    benchmark::ClobberMemory();
  }
  // The payload read; n outputs written (and read when accumulating).
  set_bytes(state, n_elems() * (payload_bytes(spec) + (accumulate ? 8.0 : 4.0)));
}

const char* const kSpecs[] = {
    "qsgd",                   // 4 bits, L2 norm, stochastic (the default)
    "qsgd:rounding=nearest",  // the same without random numbers
    "qsgd:levels=127,norm=max",
    "terngrad",
    "minmax",  // 4 bits, nearest (the default)
    "minmax:rounding=stochastic",
    "minmax:bits=3",  // a width without a byte-arithmetic fast path
    "minmax:bits=8",
};

int register_all() {
  auto reg = [](benchmark::internal::Benchmark* b) {
    b->Unit(benchmark::kMillisecond)->UseRealTime();
  };
  reg(benchmark::RegisterBenchmark("memcpy", BM_memcpy));
  reg(benchmark::RegisterBenchmark("philox_scalar", BM_philox_scalar));
  reg(benchmark::RegisterBenchmark("plain_qsgd_two_pass", BM_plain_qsgd));
  for (const char* s : kSpecs) {
    const std::string name(s);
    for (int threads : {1, 2}) {
      reg(benchmark::RegisterBenchmark((name + "/encode").c_str(), BM_encode, name)->Arg(threads));
      reg(benchmark::RegisterBenchmark((name + "/feedback").c_str(), BM_encode_feedback, name)
              ->Arg(threads));
      reg(benchmark::RegisterBenchmark((name + "/decode").c_str(), BM_decode, name, false)
              ->Arg(threads));
      reg(benchmark::RegisterBenchmark((name + "/accumulate").c_str(), BM_decode, name, true)
              ->Arg(threads));
    }
  }
  return 0;
}
const int registered = register_all();

}  // namespace

BENCHMARK_MAIN();
