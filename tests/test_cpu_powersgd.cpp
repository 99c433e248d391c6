// SPDX-License-Identifier: Apache-2.0
// PowerSGD on the CPU backend against the reference, bit for bit, on every ISA variant this
// machine runs and 1-3 threads:
// - the stateless codec: encoded bytes, decode and decode-accumulate, for f32/f16/bf16 and
//   misaligned tensors, shapes 1 x n, n x 1, 17 x 241, 300 x 257, 1000 x 1000, ranks 1-8,
//   plus shapes and ranks that reach every code path (r > 16, tall and wide tiles);
// - fused error feedback against the reference's generic composition (frame and residual,
//   every residual dtype);
// - the phase API (CPU kernels against the pinned scalar kernels) over several warm-started
//   steps with error feedback, a simulated world of two ranks, every out dtype;
// - adversarial values: NaN/Inf, -0.0, all zeros, huge and tiny magnitudes.
#include <gtest/gtest.h>

#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "contract/backend.hpp"
#include "contract/powersgd_kernels.hpp"
#include "gradcodec/cpu.hpp"
#include "support/backend_compare.hpp"
#include "support/data.hpp"

namespace gc = gradcodec;
using namespace gc::test;

namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

gc::codec_spec psgd(std::uint32_t rank, float min_rate = 2.0f) {
  gc::codec_spec s = gc::make_spec(gc::codec_id::powersgd);
  s.rank = rank;
  s.min_rate = min_rate;
  return s;
}

struct run_result {
  std::vector<std::byte> frame, dec, acc, residual;
};

//! Encode, decode and decode-accumulate of x (at a byte offset) on one backend.
run_result codec_run(const gc::codec_spec& spec, const gc::context& ctx, const tensor& x,
                     gc::backend where, int threads, std::size_t offset) {
  run_result r;
  shifted in(x, offset);
  r.frame = encode_on(spec, ctx, in.v, where, threads);
  shifted dec(tensor::zeros(x.n, x.type, x.rows), offset);
  shifted acc(tensor(gc::test::gaussian(x.n, 5), x.type, x.rows), offset);
  EXPECT_TRUE(decode_into(r.frame, dec.v, false, -0.5f, where, threads).ok());
  EXPECT_TRUE(decode_into(r.frame, acc.v, true, -0.5f, where, threads).ok());
  r.dec = dec.bytes();
  r.acc = acc.bytes();
  return r;
}

//! encode_with_feedback of grad with residual e0 on one backend.
run_result feedback_run(const gc::codec_spec& spec, const gc::context& ctx, const tensor& grad,
                        const tensor& e0, gc::backend where, int threads, std::size_t offset) {
  run_result r;
  shifted g(grad, offset), e(e0, offset);
  r.frame = encode_feedback_on(spec, ctx, g.v, e.v, where, threads);
  r.residual = e.bytes();
  return r;
}

class CpuPowersgd : public testing::Test {
 protected:
  void TearDown() override {
    (void)gc::set_cpu_isa(gc::cpu_isa_best());
    gc::set_cpu_default_threads(0);
  }
};

//! Every check of one (shape, rank, dtype) on every ISA and thread count.
void check_codec(std::uint64_t rows, std::uint64_t cols, std::uint32_t rank, gc::dtype type,
                 const std::vector<float>& values, float min_rate = 2.0f, bool misaligned = true) {
  SCOPED_TRACE(std::to_string(rows) + "x" + std::to_string(cols) + " rank " + std::to_string(rank) +
               " " + std::string(gc::dtype_name(type)));
  const auto spec = psgd(rank, min_rate);
  const gc::context ctx{7, 11, 13};
  const tensor x(values, type, rows);
  const run_result want = codec_run(spec, ctx, x, gc::backend::reference, 1, 0);
  std::vector<run_result> want_ef;
  std::vector<tensor> e0;
  for (auto et : {gc::dtype::f32, gc::dtype::f16, gc::dtype::bf16}) {
    e0.emplace_back(gc::test::gaussian(rows * cols, rows + 3 * cols, 0.25f), et, rows);
    want_ef.push_back(feedback_run(spec, ctx, x, e0.back(), gc::backend::reference, 1, 0));
  }
  for (auto isa : supported_isas()) {
    ASSERT_TRUE(gc::set_cpu_isa(isa).ok());
    for (int threads : {1, 2, 3}) {
      for (std::size_t offset : {std::size_t{0}, std::size_t{misaligned ? 2u : 0u}}) {
        SCOPED_TRACE(std::string(gc::cpu_isa_name(isa)) + " threads " + std::to_string(threads) +
                     " offset " + std::to_string(offset));
        const run_result got = codec_run(spec, ctx, x, gc::backend::cpu, threads,
                                         type == gc::dtype::f32 ? 2 * offset : offset);
        ASSERT_EQ(got.frame, want.frame);
        ASSERT_EQ(got.dec, want.dec);
        ASSERT_EQ(got.acc, want.acc);
        for (std::size_t k = 0; k < e0.size(); ++k) {
          SCOPED_TRACE("residual " + std::string(gc::dtype_name(e0[k].type)));
          // 4 bytes: misaligned for SIMD, aligned for every element size (f32 g, f16 e).
          const run_result ef =
              feedback_run(spec, ctx, x, e0[k], gc::backend::cpu, threads, 2 * offset);
          ASSERT_EQ(ef.frame, want_ef[k].frame);
          ASSERT_EQ(ef.residual, want_ef[k].residual);
        }
        if (!misaligned) break;
      }
    }
  }
}

TEST_F(CpuPowersgd, CodecMatchesReferenceOnTheListedShapes) {
  struct shape {
    std::uint64_t rows, cols;
  };
  for (const shape s : {shape{1, 1000}, shape{1000, 1}, shape{17, 241}, shape{300, 257}}) {
    for (std::uint32_t rank : {1u, 2u, 4u, 8u}) {
      for (auto type : {gc::dtype::f32, gc::dtype::f16, gc::dtype::bf16}) {
        check_codec(s.rows, s.cols, rank, type, gc::test::gaussian(s.rows * s.cols, s.rows + rank));
        if (HasFatalFailure()) return;
      }
      // min_rate = 0 compresses 1 x n and n x 1 too? No: rows or cols of 1 never compress.
    }
  }
}

TEST_F(CpuPowersgd, CodecMatchesReferenceOn1000x1000) {
  for (std::uint32_t rank : {1u, 2u, 4u, 8u}) {
    check_codec(1000, 1000, rank, rank == 4 ? gc::dtype::bf16 : gc::dtype::f32,
                gc::test::gaussian(1000 * 1000, rank), 2.0f, false);
    if (HasFatalFailure()) return;
  }
}

TEST_F(CpuPowersgd, CodecMatchesReferenceOnEveryCodePath) {
  struct shape {
    std::uint64_t rows, cols;
    std::uint32_t rank;
  };
  // r > 16 (generic lanes of out), r not a multiple of the register groups, many 256-row
  // chunks (deep counters), rows not a multiple of 16, cols above one 4096-column tile, and
  // blocks narrower than 16 columns.
  for (const shape s :
       {shape{300, 257, 17}, shape{130, 200, 64}, shape{100, 90, 33}, shape{4100, 20, 3},
        shape{9, 4500, 2}, shape{2, 9000, 1}, shape{513, 7, 5}, shape{33, 33, 16}}) {
    check_codec(s.rows, s.cols, s.rank, gc::dtype::f32,
                gc::test::gaussian(s.rows * s.cols, s.rows * 7 + s.rank), 0.0f, false);
    if (HasFatalFailure()) return;
    check_codec(s.rows, s.cols, s.rank, gc::dtype::f16,
                gc::test::gaussian(s.rows * s.cols, s.rows * 5 + s.rank), 0.0f, false);
    if (HasFatalFailure()) return;
  }
}

TEST_F(CpuPowersgd, CodecMatchesReferenceOnAdversarialValues) {
  const std::uint64_t rows = 70, cols = 300;
  const std::uint64_t n = rows * cols;
  std::vector<std::vector<float>> cases;
  cases.push_back(std::vector<float>(n, 0.0f));   // all zeros: P = 0, Q = 0
  cases.push_back(std::vector<float>(n, -0.0f));  // -0.0 acts as zero
  {
    auto v = gc::test::gaussian(n, 1);
    v[3 * cols + 17] = kNaN;  // NaN: everything NaN
    cases.push_back(v);
  }
  {
    auto v = gc::test::gaussian(n, 2);
    v[69 * cols + 299] = -kInf;  // Inf at the last element
    cases.push_back(v);
  }
  {
    auto v = gc::test::gaussian(n, 3, 1e30f);  // overflowing products
    cases.push_back(v);
  }
  {
    auto v = gc::test::gaussian(n, 4, 1e-40f);  // subnormal inputs
    cases.push_back(v);
  }
  {
    auto v = gc::test::gaussian(n, 5);  // rank-deficient: rows 1.. equal row 0 up to sign
    for (std::uint64_t i = 1; i < rows; ++i)
      for (std::uint64_t j = 0; j < cols; ++j) v[i * cols + j] = (i % 2 ? -1.0f : 2.0f) * v[j];
    cases.push_back(v);
  }
  for (std::size_t k = 0; k < cases.size(); ++k) {
    SCOPED_TRACE("case " + std::to_string(k));
    check_codec(rows, cols, 4, gc::dtype::f32, cases[k], 2.0f, false);
    if (HasFatalFailure()) return;
    check_codec(rows, cols, 20, gc::dtype::f32, cases[k], 0.0f, false);
    if (HasFatalFailure()) return;
  }
  // A dense frame keeps NaN, Inf and -0.0 where they were; feedback leaves NaN there.
  auto v = gc::test::gaussian(40, 9);
  v[0] = -0.0f;
  v[5] = kNaN;
  v[39] = kInf;
  check_codec(1, 40, 4, gc::dtype::f32, v);
}

// ---- the phase API ----------------------------------------------------------------------

//! Everything the phases wrote over a few steps, for one kernel choice.
struct phase_trace {
  std::vector<float> log;  // p, q, residual after each phase
  std::vector<std::byte> out;
};

void append(std::vector<float>& log, const std::vector<float>& v) {
  log.insert(log.end(), v.begin(), v.end());
}

phase_trace run_phases(const gc::exec_options& opt, std::uint64_t rows, std::uint64_t cols,
                       std::uint32_t rank, gc::dtype out_type, bool ef, int steps,
                       float scale = 1.0f, float special = 0.0f) {
  const gc::codec_spec spec = psgd(rank);
  const gc::context ctx{3, 0, 21};
  const std::uint32_t r = gc::powersgd_rank(spec, rows, cols);
  std::vector<float> q(cols * r), p(rows * r), residual(rows * cols, 0.0f);
  phase_trace t;
  EXPECT_TRUE(gc::powersgd_init_q(spec, ctx, rows, cols, q, opt).ok());
  append(t.log, q);
  for (int step = 0; step < steps; ++step) {
    auto gv = gc::test::gaussian(rows * cols, 100 + step, scale);
    if (special != 0.0f && step == 1) gv[gv.size() / 2] = special;
    const tensor g(gv, out_type == gc::dtype::f32 ? gc::dtype::f32 : gc::dtype::bf16, rows);
    EXPECT_TRUE(gc::powersgd_compute_p(spec, g.cview(), residual, q, p, opt).ok());
    append(t.log, p);
    append(t.log, residual);
    for (auto& x : p) x = x + x;  // allreduce-sum over two identical ranks
    EXPECT_TRUE(gc::powersgd_compute_q(spec, p, residual, rows, cols, q, opt).ok());
    append(t.log, p);
    append(t.log, q);
    for (auto& x : q) x = x + x;
    tensor out = tensor::zeros(rows * cols, out_type, rows);
    EXPECT_TRUE(gc::powersgd_finish(spec, p, q, 2, ef, residual, out.mview(), opt).ok());
    append(t.log, q);
    append(t.log, residual);
    t.out.insert(t.out.end(), out.bytes.begin(), out.bytes.end());
  }
  return t;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * 4) == 0;
}

void check_phases(std::uint64_t rows, std::uint64_t cols, std::uint32_t rank, gc::dtype out_type,
                  bool ef, int steps, float scale = 1.0f, float special = 0.0f) {
  SCOPED_TRACE(std::to_string(rows) + "x" + std::to_string(cols) + " rank " + std::to_string(rank) +
               " out " + std::string(gc::dtype_name(out_type)) + (ef ? " ef" : ""));
  const phase_trace want = run_phases(gc::exec_options{gc::backend::reference}, rows, cols, rank,
                                      out_type, ef, steps, scale, special);
  for (auto isa : supported_isas()) {
    ASSERT_TRUE(gc::set_cpu_isa(isa).ok());
    // The phases run the kernels of the backend codec calls take: the pinned ISA's.
    ASSERT_STREQ(gc::detail::powersgd_host_kernels(gc::backend::automatic)->name,
                 (std::string("cpu-") + std::string(gc::cpu_isa_name(isa))).c_str());
    ASSERT_STREQ(gc::detail::powersgd_host_kernels(gc::backend::reference)->name,
                 gc::detail::powersgd_scalar_kernels().name);
    for (int threads : {1, 2, 3}) {
      SCOPED_TRACE(std::string(gc::cpu_isa_name(isa)) + " threads " + std::to_string(threads));
      gc::set_cpu_default_threads(threads);
      const phase_trace got =
          run_phases(gc::exec_options{}, rows, cols, rank, out_type, ef, steps, scale, special);
      ASSERT_TRUE(same_bits(got.log, want.log));
      ASSERT_EQ(got.out, want.out);
    }
  }
}

TEST_F(CpuPowersgd, PhasesMatchScalarKernels) {
  struct shape {
    std::uint64_t rows, cols;
  };
  for (const shape s : {shape{1, 300}, shape{300, 1}, shape{17, 241}, shape{300, 257}}) {
    for (std::uint32_t rank : {1u, 2u, 4u, 8u}) {
      check_phases(s.rows, s.cols, rank, rank == 2 ? gc::dtype::f16 : gc::dtype::f32, rank != 8, 3);
      if (HasFatalFailure()) return;
    }
  }
}

TEST_F(CpuPowersgd, PhasesMatchScalarKernelsOn1000x1000) {
  for (std::uint32_t rank : {1u, 2u, 4u, 8u}) {
    check_phases(1000, 1000, rank, rank == 1 ? gc::dtype::bf16 : gc::dtype::f32, true, 2);
    if (HasFatalFailure()) return;
  }
}

TEST_F(CpuPowersgd, PhasesMatchScalarKernelsOnEveryCodePath) {
  // r > 16, Q tiles narrower than the matrix (16384 / r columns), the bounded Q pass with
  // fewer columns of P per pass (r = 64), deep chunk counters, NaN and Inf mid-run.
  check_phases(64, 2100, 8, gc::dtype::f32, true, 2);
  if (HasFatalFailure()) return;
  check_phases(300, 300, 64, gc::dtype::f32, true, 2);
  if (HasFatalFailure()) return;
  check_phases(130, 259, 17, gc::dtype::bf16, true, 2);
  if (HasFatalFailure()) return;
  check_phases(4100, 24, 3, gc::dtype::f32, true, 2);
  if (HasFatalFailure()) return;
  check_phases(40, 50, 4, gc::dtype::f32, true, 3, 1.0f, kNaN);
  if (HasFatalFailure()) return;
  check_phases(40, 50, 4, gc::dtype::f32, true, 3, 1.0f, -kInf);
  if (HasFatalFailure()) return;
  check_phases(40, 50, 4, gc::dtype::f16, false, 3, 1e-39f);
}

TEST_F(CpuPowersgd, PhaseNonfiniteErrorWritesNothing) {
  gc::codec_spec spec = psgd(2);
  spec.nonfinite = gc::nonfinite_policy::error;
  const std::uint64_t rows = 20, cols = 30;
  std::vector<float> q(cols * 2, 0.5f), p(rows * 2, 7.0f);
  auto gv = gc::test::gaussian(rows * cols, 1);
  std::vector<float> residual(rows * cols, 1.0f);
  residual[77] = std::numeric_limits<float>::max();
  gv[77] = std::numeric_limits<float>::max();  // finite, but residual + grad overflows
  for (auto isa : supported_isas()) {
    ASSERT_TRUE(gc::set_cpu_isa(isa).ok());
    auto res = residual;
    auto pp = p;
    EXPECT_EQ(gc::powersgd_compute_p(spec, gc::view(gv, rows), res, q, pp).code(),
              gc::status_code::nonfinite_input);
    EXPECT_TRUE(same_bits(res, residual));
    EXPECT_TRUE(same_bits(pp, p));
  }
}

}  // namespace
