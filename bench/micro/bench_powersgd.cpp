// SPDX-License-Identifier: Apache-2.0
// PowerSGD on the CPU backend (docs/performance.md, "CPU backend (measured)"): one local step of
// the phase API with error feedback (compute_p, compute_q, finish), each phase alone, the stateless
// codec (encode, fused error feedback, decode, decode-accumulate), against a memcpy of the
// matrix and the same products done by OpenBLAS's sgemm (when BLAS was found: it sums in
// its own order, so it can only be the comparison, not the implementation). One thread
// (the phases: one and two, their argument); rank 4 on 4096 x 4096 f32 by default
// (GRADCODEC_BENCH_ROWS / _COLS / _RANK override). Bytes/s follow the bytes model of
// performance.md.
#include <benchmark/benchmark.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "gradcodec/cpu.hpp"
#include "gradcodec/gradcodec.hpp"
#include "micro_common.hpp"

#if GRADCODEC_BENCH_BLAS
extern "C" {
void sgemm_(const char* transa, const char* transb, const int* m, const int* n, const int* k,
            const float* alpha, const float* a, const int* lda, const float* b, const int* ldb,
            const float* beta, float* c, const int* ldc);
void openblas_set_num_threads(int threads);
}
#endif

namespace gc = gradcodec;

namespace {

using namespace gc::micro;

std::uint64_t env_or(const char* name, std::uint64_t fallback) {
  const char* s = std::getenv(name);
  return s ? std::strtoull(s, nullptr, 10) : fallback;
}
std::uint64_t rows() { return env_or("GRADCODEC_BENCH_ROWS", 4096); }
std::uint64_t cols() { return env_or("GRADCODEC_BENCH_COLS", 4096); }
std::uint32_t rank() { return static_cast<std::uint32_t>(env_or("GRADCODEC_BENCH_RANK", 4)); }
double elems() { return static_cast<double>(rows() * cols()); }

//! Gaussian values, one sequence per seed.
std::vector<float> gaussian_matrix(std::uint64_t seed, float scale) {
  return gaussian(rows() * cols(), seed * 0x9E3779B97F4A7C15ull + 1, scale);
}

//! The gradient (a fixed Gaussian matrix), generated once.
const std::vector<float>& grad() {
  static const std::vector<float> g = gaussian_matrix(1, 1.0f);
  return g;
}

gc::codec_spec spec() {
  gc::codec_spec s = gc::make_spec(gc::codec_id::powersgd);
  s.rank = rank();
  return s;
}

//! Reports bytes_per_element of the matrix per iteration as the benchmark's bytes/s.
void set_matrix_bytes(benchmark::State& state, double bytes_per_element) {
  set_bytes(state, bytes_per_element * elems());
}

void use_threads(int threads) {
  gc::set_cpu_default_threads(threads);
#if GRADCODEC_BENCH_BLAS
  openblas_set_num_threads(1);
#endif
}
void one_thread() { use_threads(1); }

// ---- Memory baseline ---------------------------------------------------------------------

void BM_memcpy(benchmark::State& state) { memcpy_baseline(state, grad()); }

// ---- The phase API -----------------------------------------------------------------------
// The argument is the thread count (the phases take the default one).

struct phase_state {
  std::uint32_t r;
  std::vector<float> q, p, residual, out;
  explicit phase_state(int threads)
      : r(gc::powersgd_rank(spec(), rows(), cols())),
        q(cols() * r),
        p(rows() * r),
        residual(gaussian_matrix(2, 0.1f)),
        out(rows() * cols()) {
    use_threads(threads);
    if (!gc::powersgd_init_q(spec(), {5, 0, 1}, rows(), cols(), q).ok()) std::abort();
  }
};

//! One local step with error feedback (W = 1): 28 bytes per element (performance.md).
void BM_phase_step(benchmark::State& state) {
  phase_state s(static_cast<int>(state.range(0)));
  const auto sp = spec();
  for (auto _ : state) {
    bool ok = gc::powersgd_compute_p(sp, gc::view(grad(), rows()), s.residual, s.q, s.p).ok();
    ok = ok && gc::powersgd_compute_q(sp, s.p, s.residual, rows(), cols(), s.q).ok();
    ok = ok && gc::powersgd_finish(sp, s.p, s.q, 1, true, s.residual, gc::view(s.out, rows())).ok();
    if (!ok) state.SkipWithError("phase failed");
    benchmark::ClobberMemory();
  }
  set_matrix_bytes(state, 28.0);
}

//! residual += grad; P = M Q: reads g and e, writes M (12 bytes per element).
void BM_phase_compute_p(benchmark::State& state) {
  phase_state s(static_cast<int>(state.range(0)));
  const auto sp = spec();
  for (auto _ : state) {
    if (!gc::powersgd_compute_p(sp, gc::view(grad(), rows()), s.residual, s.q, s.p).ok())
      state.SkipWithError("compute_p failed");
    benchmark::ClobberMemory();
  }
  set_matrix_bytes(state, 12.0);
}

//! orth(P); Q = M^T P: reads M (4 bytes per element).
void BM_phase_compute_q(benchmark::State& state) {
  phase_state s(static_cast<int>(state.range(0)));
  const auto sp = spec();
  if (!gc::powersgd_compute_p(sp, gc::view(grad(), rows()), s.residual, s.q, s.p).ok())
    std::abort();
  const std::vector<float> p0 = s.p;
  for (auto _ : state) {
    std::memcpy(s.p.data(), p0.data(), p0.size() * 4);  // r x rows floats: negligible
    if (!gc::powersgd_compute_q(sp, s.p, s.residual, rows(), cols(), s.q).ok())
      state.SkipWithError("compute_q failed");
    benchmark::ClobberMemory();
  }
  set_matrix_bytes(state, 4.0);
}

//! out = P Q^T; e = M - out: reads M, writes e and out (12 bytes per element).
void BM_phase_finish(benchmark::State& state) {
  phase_state s(static_cast<int>(state.range(0)));
  const auto sp = spec();
  for (auto _ : state) {
    if (!gc::powersgd_finish(sp, s.p, s.q, 1, true, s.residual, gc::view(s.out, rows())).ok())
      state.SkipWithError("finish failed");
    benchmark::ClobberMemory();
  }
  set_matrix_bytes(state, 12.0);
}

// ---- The stateless codec -----------------------------------------------------------------

//! One thread, with a workspace (held in ws) for op on the gradient.
gc::exec_options codec_options(std::vector<std::byte>& ws, gc::operation op) {
  one_thread();
  return cpu_options(ws, spec(), gc::view(grad(), rows()), op);
}

//! Two passes over M (P = M Q0, Q = M^T P-hat): 8 bytes per element.
void BM_encode(benchmark::State& state) {
  std::vector<std::byte> ws;
  const auto opt = codec_options(ws, gc::operation::encode);
  std::vector<std::byte> out(gc::encode_bound(spec(), rows() * cols(), gc::dtype::f32, rows()));
  for (auto _ : state) {
    if (!gc::encode(spec(), {5, 0, 1}, gc::view(grad(), rows()), out, opt).ok())
      state.SkipWithError("encode failed");
    benchmark::ClobberMemory();
  }
  set_matrix_bytes(state, 8.0);
}

//! Fused error feedback: 24 bytes per element (performance.md).
void BM_encode_feedback(benchmark::State& state) {
  std::vector<std::byte> ws;
  const auto opt = codec_options(ws, gc::operation::encode_with_feedback);
  std::vector<std::byte> out(gc::encode_bound(spec(), rows() * cols(), gc::dtype::f32, rows()));
  std::vector<float> residual = gaussian_matrix(2, 0.1f);
  for (auto _ : state) {
    if (!gc::encode_with_feedback(spec(), {5, 0, 1}, gc::view(grad(), rows()),
                                  gc::view(residual, rows()), out, opt)
             .ok())
      state.SkipWithError("encode_with_feedback failed");
    benchmark::ClobberMemory();
  }
  set_matrix_bytes(state, 24.0);
}

//! decode writes n values (4 bytes per element); decode-accumulate reads and writes them (8).
void BM_decode(benchmark::State& state, bool accumulate) {
  std::vector<std::byte> ws;
  const auto opt = codec_options(ws, gc::operation::encode);
  std::vector<std::byte> frame(gc::encode_bound(spec(), rows() * cols(), gc::dtype::f32, rows()));
  frame.resize(gc::encode(spec(), {5, 0, 1}, gc::view(grad(), rows()), frame, opt).value());
  std::vector<float> out(rows() * cols(), 0.0f);
  const auto dopt = cpu_options();
  for (auto _ : state) {
    auto st = accumulate ? gc::decode_accumulate(frame, gc::view(out, rows()), 0.5f, dopt)
                         : gc::decode(frame, gc::view(out, rows()), dopt);
    if (!st.ok()) state.SkipWithError(st.message());
    benchmark::ClobberMemory();
  }
  set_matrix_bytes(state, accumulate ? 8.0 : 4.0);
}

// ---- OpenBLAS ------------------------------------------------------------------------------
// Row-major M (rows x cols) is column-major M^T (cols x rows, ld = cols) to Fortran BLAS.

#if GRADCODEC_BENCH_BLAS
struct blas_state {
  int m = static_cast<int>(rows()), n = static_cast<int>(cols()), r;
  std::vector<float> q, p, residual;
  blas_state()
      : r(static_cast<int>(gc::powersgd_rank(spec(), rows(), cols()))),
        q(cols() * static_cast<std::uint64_t>(r)),
        p(rows() * static_cast<std::uint64_t>(r)),
        residual(gaussian_matrix(2, 0.1f)) {
    one_thread();
    if (!gc::powersgd_init_q(spec(), {5, 0, 1}, rows(), cols(), q).ok()) std::abort();
  }
  // P (rows x r, row-major) = M Q: column-major P^T (r x rows) = Q^T (r x cols) M^T.
  void p_of_m() {
    const float one = 1.0f, zero = 0.0f;
    sgemm_("N", "N", &r, &m, &n, &one, q.data(), &r, residual.data(), &n, &zero, p.data(), &r);
  }
  // Q (cols x r, row-major) = M^T P: column-major Q^T (r x cols) = P^T (r x rows) M.
  void q_of_m() {
    const float one = 1.0f, zero = 0.0f;
    sgemm_("N", "T", &r, &n, &m, &one, p.data(), &r, residual.data(), &n, &zero, q.data(), &r);
  }
  // e = M - P Q^T in place: column-major E^T (cols x rows) -= Q (cols x r) P^T.
  void e_of_m() {
    const float minus_one = -1.0f, one = 1.0f;
    sgemm_("T", "N", &n, &m, &r, &minus_one, q.data(), &r, p.data(), &r, &one, residual.data(), &n);
  }
};

//! The same local step with sgemm for the three products (g + e and Gram-Schmidt as in
//! gradcodec): 24 bytes per element (no separate out: sgemm updates e in place).
void BM_blas_step(benchmark::State& state) {
  blas_state s;
  const auto& g = grad();
  for (auto _ : state) {
    for (std::size_t k = 0; k < g.size(); ++k) s.residual[k] = s.residual[k] + g[k];
    s.p_of_m();
    if (!gc::powersgd_orthogonalize(s.p, rows(), static_cast<std::uint32_t>(s.r), 1e-8f).ok())
      state.SkipWithError("orthogonalize failed");
    s.q_of_m();
    s.e_of_m();
    benchmark::ClobberMemory();
  }
  set_matrix_bytes(state, 24.0);
}

void BM_blas_p(benchmark::State& state) {
  blas_state s;
  for (auto _ : state) {
    s.p_of_m();
    benchmark::ClobberMemory();
  }
  set_matrix_bytes(state, 4.0);
}

void BM_blas_q(benchmark::State& state) {
  blas_state s;
  for (auto _ : state) {
    s.q_of_m();
    benchmark::ClobberMemory();
  }
  set_matrix_bytes(state, 4.0);
}

void BM_blas_residual(benchmark::State& state) {
  blas_state s;
  for (auto _ : state) {
    s.e_of_m();
    benchmark::ClobberMemory();
  }
  set_matrix_bytes(state, 8.0);
}
#endif

}  // namespace

BENCHMARK(BM_memcpy)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_phase_step)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_phase_compute_p)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_phase_compute_q)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_phase_finish)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_encode)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_encode_feedback)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_decode, plain, false)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_decode, accumulate, true)->Unit(benchmark::kMillisecond);
#if GRADCODEC_BENCH_BLAS
BENCHMARK(BM_blas_step)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_blas_p)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_blas_q)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_blas_residual)->Unit(benchmark::kMillisecond);
#endif

BENCHMARK_MAIN();
