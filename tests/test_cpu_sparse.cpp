// SPDX-License-Identifier: Apache-2.0
// CPU sparsification kernels (cpu/kernels/select-inl.hpp, sparse-inl.hpp, randomk-inl.hpp)
// against the reference, beyond the generic sweep of test_cpu_backend.cpp: tie-heavy and special
// values, several tasks, inputs that defeat the top-k threshold guess and force the DGC
// fallback and re-collection, fused error feedback against the reference's generic
// composition, corrupt payloads, and misaligned buffers. Every ISA this machine runs,
// 1-3 threads, exact byte comparisons.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "cpu/common.hpp"
#include "gradcodec/blocks/philox.hpp"
#include "gradcodec/cpu.hpp"
#include "support/backend_compare.hpp"
#include "support/data.hpp"

namespace gc = gradcodec;
using namespace gc::test;

namespace {

constexpr float inf = std::numeric_limits<float>::infinity();
const float qnan = std::numeric_limits<float>::quiet_NaN();

//! The alpha of every decode-accumulate here.
constexpr float kAlpha = -0.75f;

//! Frame bytes, decode and decode-accumulate on every ISA and 1-3 threads equal the
//! reference's.
void expect_matches(const std::string& spec_text, const std::vector<float>& values, gc::dtype type,
                    const gc::context& ctx = {3, 5, 8}) {
  isa_guard restore;
  const gc::codec_spec spec = gc::parse_spec(spec_text).value();
  const tensor x(values, type);
  const tensor zeros = tensor::zeros(x.n, type);
  const tensor acc(gc::test::gaussian(x.n, 99), type);
  const auto want = encode_on(spec, ctx, x.cview(), gc::backend::reference, 1);
  ASSERT_FALSE(want.empty());
  const auto want_dec = decode_on(want, zeros, false, kAlpha, gc::backend::reference, 1);
  const auto want_acc = decode_on(want, acc, true, kAlpha, gc::backend::reference, 1);
  for (auto isa : supported_isas()) {
    ASSERT_TRUE(gc::set_cpu_isa(isa).ok());
    for (int threads : {1, 2, 3}) {
      SCOPED_TRACE(spec_text + " " + std::string(gc::dtype_name(type)) +
                   " n=" + std::to_string(x.n) + " " + std::string(gc::cpu_isa_name(isa)) +
                   " threads=" + std::to_string(threads));
      const auto got = encode_on(spec, ctx, x.cview(), gc::backend::cpu, threads, threads == 2);
      ASSERT_EQ(got, want);
      ASSERT_EQ(decode_on(got, zeros, false, kAlpha, gc::backend::cpu, threads, threads == 3),
                want_dec);
      ASSERT_EQ(decode_on(got, acc, true, kAlpha, gc::backend::cpu, threads), want_acc);
    }
  }
}

//! Fused error feedback on the CPU equals the reference's generic composition (p = g + e,
//! encode p, residual = p - decode), frame and residual bytes alike.
void expect_feedback_matches(const std::string& spec_text, const std::vector<float>& g,
                             const std::vector<float>& e, gc::dtype gtype, gc::dtype etype) {
  isa_guard restore;
  const gc::codec_spec spec = gc::parse_spec(spec_text).value();
  const gc::context ctx{11, 2, 4};
  const tensor grad(g, gtype), res0(e, etype);
  const auto want = feedback_on(spec, ctx, grad, res0, gc::backend::reference);
  ASSERT_FALSE(want.frame.empty());
  for (auto isa : supported_isas()) {
    ASSERT_TRUE(gc::set_cpu_isa(isa).ok());
    for (int threads : {1, 3}) {
      SCOPED_TRACE(spec_text + " g=" + std::string(gc::dtype_name(gtype)) + " e=" +
                   std::string(gc::dtype_name(etype)) + " n=" + std::to_string(grad.n) + " " +
                   std::string(gc::cpu_isa_name(isa)) + " threads=" + std::to_string(threads));
      ASSERT_EQ(cpu_feedback_difference(want, spec, ctx, grad, res0, threads), "");
    }
  }
}

const char* const kSparseSpecs[] = {
    "topk:k=1",
    "topk:ratio=0.01",
    "topk:ratio=0.5",
    "topk:ratio=1",
    "dgc:ratio=0.01",
    "dgc:ratio=0.2,sample=0.05",
    "dgc:ratio=1",
    "threshold:tau=0",
    "threshold:tau=1,cap=100",
    "threshold:tau=0.5",
    "threshold:tau=0.5,cap=1",
    "randomk:ratio=0.01",
    "randomk:ratio=1,unbiased=1",
    "randomk:k=7,unbiased=1",
};

//! Inputs full of ties and special values.
std::vector<std::vector<float>> special_inputs(std::size_t n) {
  std::vector<std::vector<float>> out;
  out.emplace_back(n, 1.5f);  // one key everywhere
  std::vector<float> few(n), sparse(n, 0.0f), specials = gc::test::gaussian(n, 7), tiny(n);
  for (std::size_t i = 0; i < n; ++i) {
    const int q = static_cast<int>((i * 7919u) % 5u) - 2;  // -2..2, zeros of both signs
    few[i] = q == 0 ? (i % 2 ? -0.0f : 0.0f) : static_cast<float>(q) * 0.75f;
    if (i % 211 == 3) sparse[i] = specials[i];
    if (i % 97 == 5) specials[i] = qnan;
    if (i % 101 == 7) specials[i] = i % 2 ? inf : -inf;
    if (i % 89 == 1) specials[i] = i % 2 ? -0.0f : std::numeric_limits<float>::max();
    tiny[i] = static_cast<float>(i % 13) * 1e-41f * (i % 2 ? -1.0f : 1.0f);  // subnormals
  }
  out.push_back(few);
  out.push_back(sparse);
  out.push_back(specials);
  out.push_back(tiny);
  return out;
}

TEST(CpuSparse, TiesAndSpecialValuesMatchReference) {
  for (std::size_t n :
       {std::size_t{0}, std::size_t{5}, std::size_t{1000}, std::size_t{3 * 65536 + 77}}) {
    for (const auto& v : special_inputs(n))
      for (const char* s : kSparseSpecs)
        for (auto type : {gc::dtype::f32, gc::dtype::bf16}) {
          if (n > 1000 && type != gc::dtype::f32) continue;  // several tasks: f32 is enough
          expect_matches(s, v, type);
          if (HasFatalFailure()) return;
        }
  }
}

TEST(CpuSparse, HalfInputsAndTopkNearN) {
  const std::size_t n = 70001;
  const auto v = gc::test::gaussian(n, 21);
  for (const std::string s : {"topk:k=70000", "topk:k=69999", "dgc:k=70000", "topk:ratio=0.001",
                              "threshold:tau=2", "randomk:ratio=0.3"}) {
    for (auto type : {gc::dtype::f32, gc::dtype::f16, gc::dtype::bf16}) {
      expect_matches(s, v, type);
      if (HasFatalFailure()) return;
    }
  }
}

TEST(CpuSparse, TopkGuessDefeatedFallsBackExactly) {
  // The sampled positions of the threshold guess hold the largest values, so far fewer than
  // k elements reach the guess and every element is collected again.
  const std::size_t n = std::size_t{1} << 17;
  const std::uint64_t s = gc::cpu::topk_sample_size(n);
  ASSERT_GT(s, 0u);
  std::vector<float> v = gc::test::gaussian(n, 5, 0.1f);
  for (std::uint64_t j = 0; j < s; ++j)
    v[gc::cpu::topk_sample_position(j, s, n)] = 100.0f + static_cast<float>(j % 17);
  for (const char* spec : {"topk:ratio=0.05", "topk:ratio=0.2"}) {
    expect_matches(spec, v, gc::dtype::f32);
    expect_feedback_matches(spec, v, gc::test::gaussian(n, 6, 0.01f), gc::dtype::f32,
                            gc::dtype::f32);
    expect_feedback_matches(spec, v, gc::test::gaussian(n, 6, 0.01f), gc::dtype::f32,
                            gc::dtype::bf16);
  }
}

//! Values where DGC's strided sample (sample = 0.5: stride 2) holds `sampled`, the other
//! elements `other` (plus a little noise so keys differ).
std::vector<float> dgc_split(std::size_t n, float sampled, float other, const gc::context& ctx) {
  const auto rng = gc::blocks::counter_rng::make(ctx.seed, ctx.step, ctx.tensor_id);
  const std::uint64_t start = gc::blocks::scale_u32(rng.at(gc::blocks::rng_stream::sampling, 0), 2);
  std::vector<float> v(n);
  const auto noise = gc::test::gaussian(n, 17, 0.001f);
  for (std::size_t i = 0; i < n; ++i) v[i] = ((i % 2) == start ? sampled : other) + noise[i];
  return v;
}

//! Values near 1 except at the sample positions of the top-k threshold guess, which hold the
//! largest values: too few elements reach the guess.
std::vector<float> guess_defeating(std::size_t n, std::uint64_t seed) {
  std::vector<float> v = gc::test::gaussian(n, seed, 0.01f);
  for (auto& x : v) x += 1.0f;
  const std::uint64_t s = gc::cpu::topk_sample_size(n);
  for (std::uint64_t j = 0; j < s; ++j)
    v[gc::cpu::topk_sample_position(j, s, n)] = 100.0f + static_cast<float>(j % 17);
  return v;
}

TEST(CpuSparse, DgcFallbackAndRecollection) {
  const std::size_t n = (std::size_t{1} << 17) + 6;
  const gc::context ctx{3, 5, 8};
  // DGC's sample at ~1000, the rest below 1: even t/8 leaves n/2 candidates < k (fallback).
  const auto fallback = dgc_split(n, 1000.0f, 0.5f, ctx);
  // DGC's threshold is fine, the guess is not: candidates are collected again at t/8.
  const auto recollect = guess_defeating(n, 4);
  for (auto type : {gc::dtype::f32, gc::dtype::f16}) {
    expect_matches("dgc:ratio=0.75,sample=0.5", fallback, type, ctx);
    expect_matches("dgc:ratio=0.5,sample=0.5", recollect, type, ctx);
    if (HasFatalFailure()) return;
  }
  // The same under error feedback (whose context is {11, 2, 4}).
  const auto e = gc::test::gaussian(n, 8, 1e-4f);
  for (auto etype : {gc::dtype::f32, gc::dtype::f16}) {
    expect_feedback_matches("dgc:ratio=0.75,sample=0.5", dgc_split(n, 1000.0f, 0.5f, {11, 2, 4}), e,
                            gc::dtype::f32, etype);
    expect_feedback_matches("dgc:ratio=0.5,sample=0.5", recollect, e, gc::dtype::f32, etype);
  }
}

TEST(CpuSparse, FusedFeedbackMatchesGenericComposition) {
  const std::pair<gc::dtype, gc::dtype> types[] = {{gc::dtype::f32, gc::dtype::f32},
                                                   {gc::dtype::f16, gc::dtype::f32},
                                                   {gc::dtype::bf16, gc::dtype::bf16},
                                                   {gc::dtype::f32, gc::dtype::f16}};
  for (std::size_t n :
       {std::size_t{0}, std::size_t{1}, std::size_t{4097}, std::size_t{2 * 65536 + 9}}) {
    auto g = gc::test::gaussian(n, n);
    const auto e = gc::test::gaussian(n, n + 1, 0.3f);
    if (n > 100) {
      g[17] = qnan;
      g[n - 2] = inf;
    }
    for (const char* s : {"topk:ratio=0.01", "topk:k=1", "topk:ratio=1", "dgc:ratio=0.05",
                          "threshold:tau=1.5", "threshold:tau=1,cap=50", "randomk:ratio=0.1",
                          "randomk:ratio=0.1,unbiased=1", "randomk:ratio=1"}) {
      for (auto [gt, et] : types) {
        expect_feedback_matches(s, g, e, gt, et);
        if (HasFatalFailure()) return;
      }
    }
  }
}

//! Tasks (65536 elements) whose candidates fit the uncapped threshold's bounded region and
//! tasks that overflow it (a plain encode reads those again; error feedback copies the
//! region out each time it fills), side by side: no candidate, exactly the region's 2048
//! slots, one more, all of them, a sparse one, and a short last task.
std::vector<float> threshold_task_mix() {
  constexpr std::size_t task = 65536;
  const std::size_t dense_at[] = {0, task / 32, task / 32 + 1, task, task / 211, 300};
  std::vector<float> v;
  for (std::size_t t = 0; t < 6; ++t) {
    const std::size_t len = t == 5 ? 333 : task, want = dense_at[t];
    for (std::size_t i = 0; i < len; ++i) {
      // Spread `want` values >= 1 over the task; the rest stay below 1.
      const bool big = want > 0 && (i * want) / len != ((i + 1) * want) / len;
      const float mag =
          big ? 1.0f + static_cast<float>(i % 7) * 0.25f : static_cast<float>(i % 10) * 0.09f;
      v.push_back(i % 2 ? -mag : mag);
    }
  }
  return v;
}

TEST(CpuSparse, ThresholdTasksBeyondTheRegionAreReadAgain) {
  const auto v = threshold_task_mix();
  expect_matches("threshold:tau=1", v, gc::dtype::f32);
  if (HasFatalFailure()) return;
  const auto e = gc::test::gaussian(v.size(), 5, 0.01f);
  for (auto [gt, et] :
       {std::pair{gc::dtype::f32, gc::dtype::f32}, std::pair{gc::dtype::bf16, gc::dtype::f16}}) {
    expect_feedback_matches("threshold:tau=1", v, e, gt, et);
    if (HasFatalFailure()) return;
  }
}

//! A buffer that holds the frame but not a frame of every element: the fused error feedback
//! cannot store p in the residual during its first pass, and must still match.
TEST(CpuSparse, ThresholdFeedbackIntoAnExactlySizedBuffer) {
  isa_guard restore;
  const auto g = threshold_task_mix();
  const auto e0 = gc::test::gaussian(g.size(), 6, 0.01f);
  const auto spec = gc::parse_spec("threshold:tau=1").value();
  const gc::context ctx{2, 3, 4};
  std::vector<float> want_res = e0;
  const auto want =
      encode_feedback_on(spec, ctx, gc::view(g), gc::view(want_res), gc::backend::reference, 1);
  ASSERT_FALSE(want.empty());
  ASSERT_LT(want.size(), gc::encode_bound(spec, g.size()));
  for (auto isa : supported_isas()) {
    ASSERT_TRUE(gc::set_cpu_isa(isa).ok());
    for (int threads : {1, 3}) {
      SCOPED_TRACE(std::string(gc::cpu_isa_name(isa)) + " threads=" + std::to_string(threads));
      auto opt = options(gc::backend::cpu, threads);
      std::vector<std::byte> ws(
          gc::workspace_size(spec, gc::view(g), gc::operation::encode_with_feedback, opt).value());
      opt.workspace = ws;
      std::vector<std::byte> out(want.size());
      std::vector<float> res = e0;
      auto w = gc::encode_with_feedback(spec, ctx, gc::view(g), gc::view(res), out, opt);
      ASSERT_TRUE(w.ok()) << w.error().message();
      ASSERT_EQ(w.value(), want.size());
      EXPECT_EQ(out, want);
      EXPECT_EQ(std::memcmp(res.data(), want_res.data(), res.size() * 4), 0);
    }
  }
}

TEST(CpuSparse, CorruptIndicesAreRejectedBeforeWriting) {
  isa_guard restore;
  const std::size_t n = 3 * 65536 + 5;
  const tensor x(gc::test::gaussian(n, 3), gc::dtype::f32);
  const auto spec = gc::parse_spec("topk:ratio=0.5").value();
  const auto frame = encode_on(spec, {}, x.cview(), gc::backend::reference, 1);
  const std::uint64_t k = gc::peek(frame).value().count;
  const std::size_t index_at = 48 + gc::blocks::align16(k * 4);
  auto get = [&](const std::vector<std::byte>& f, std::uint64_t j) {
    std::uint32_t v;
    std::memcpy(&v, f.data() + index_at + j * 4, 4);
    return v;
  };
  auto set = [&](std::vector<std::byte>& f, std::uint64_t j, std::uint32_t v) {
    std::memcpy(f.data() + index_at + j * 4, &v, 4);
  };
  // Positions in the first, vector and tail parts of several validation tasks.
  for (std::uint64_t j : {std::uint64_t{0}, std::uint64_t{1}, std::uint64_t{20},
                          std::uint64_t{65536}, std::uint64_t{65537}, k - 3, k - 1}) {
    std::vector<std::vector<std::byte>> bad;
    bad.push_back(frame);
    set(bad.back(), j, static_cast<std::uint32_t>(n));  // out of range
    bad.push_back(frame);
    set(bad.back(), j, 0xFFFFFFFFu);
    if (j > 0) {
      bad.push_back(frame);
      set(bad.back(), j, get(frame, j - 1));  // duplicate
      bad.push_back(frame);
      set(bad.back(), j, get(frame, j - 1) - 1);  // descending
    }
    for (auto isa : supported_isas()) {
      ASSERT_TRUE(gc::set_cpu_isa(isa).ok());
      for (const auto& f : bad) {
        for (bool accumulate : {false, true}) {
          std::vector<float> out(n, 12345.0f);
          auto opt = options(gc::backend::cpu, 2);
          auto st = accumulate ? gc::decode_accumulate(f, gc::view(out), 1.0f, opt)
                               : gc::decode(f, gc::view(out), opt);
          EXPECT_EQ(st.code(), gc::status_code::corrupt_frame) << "entry " << j;
          EXPECT_EQ(out, std::vector<float>(n, 12345.0f)) << "entry " << j;
        }
      }
    }
  }
}

TEST(CpuSparse, ThresholdTooSmallLeavesResidualUntouched) {
  isa_guard restore;
  const std::size_t n = 5000;
  const auto g = gc::test::gaussian(n, 4);
  const auto spec = gc::parse_spec("threshold:tau=1").value();
  const auto frame = encode_on(spec, {}, gc::view(g), gc::backend::reference, 1);
  for (auto isa : supported_isas()) {
    ASSERT_TRUE(gc::set_cpu_isa(isa).ok());
    auto opt = options(gc::backend::cpu, 2);
    std::vector<std::byte> ws(
        gc::workspace_size(spec, gc::view(g), gc::operation::encode_with_feedback, opt).value());
    opt.workspace = ws;
    gc::test::guarded out(frame.size() - 1);
    std::vector<float> res(n, 0.0f);  // p = g: the frame above is one byte too big
    auto w = gc::encode_with_feedback(spec, {}, gc::view(g), gc::view(res), out.span(), opt);
    ASSERT_FALSE(w.ok());
    EXPECT_EQ(w.error().code(), gc::status_code::output_too_small);
    EXPECT_TRUE(out.untouched());
    EXPECT_EQ(res, std::vector<float>(n, 0.0f));
  }
}

}  // namespace
