// SPDX-License-Identifier: Apache-2.0
// The CPU backend against the reference oracle: for every ISA variant this machine runs,
// every codec, dtype, size, misaligned pointers and 1-3 threads, the encoded bytes and the
// decoded (and decode-accumulated) values are identical.
#include <gtest/gtest.h>

#include <ostream>
#include <string>

#include "gradcodec/cpu.hpp"
#include "support/backend_compare.hpp"
#include "support/data.hpp"
#include "support/specs.hpp"

namespace gc = gradcodec;
using namespace gc::test;

namespace {

struct param {
  std::string spec;
  gc::cpu_isa isa;
};

std::vector<param> all_params() {
  std::vector<param> out;
  for (const char* s : gc::test::kSpecs)
    for (auto isa : supported_isas()) out.push_back({s, isa});
  return out;
}

//! How gtest prints a case (in test listings and failures): "topk:ratio=0.05 on avx2".
void PrintTo(const param& p, std::ostream* os) {
  *os << p.spec << " on " << gc::cpu_isa_name(p.isa);
}

std::string name_of(const testing::TestParamInfo<param>& p) {
  std::string s = p.param.spec + "_" + std::string(gc::cpu_isa_name(p.param.isa));
  for (auto& c : s)
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  return s;
}

class CpuMatchesReference : public testing::TestWithParam<param> {
 protected:
  void SetUp() override { ASSERT_TRUE(gc::set_cpu_isa(GetParam().isa).ok()); }
  void TearDown() override { (void)gc::set_cpu_isa(gc::cpu_isa_best()); }
};

TEST_P(CpuMatchesReference, BytesAndValuesAreIdentical) {
  const auto spec = gc::parse_spec(GetParam().spec).value();
  const gc::context ctx{7, 11, 13};
  for (auto type : {gc::dtype::f32, gc::dtype::f16, gc::dtype::bf16}) {
    // 2^18 + 3: five stream_grain tasks, uneven over 3 threads, and top-k's full sample
    // (kernel paths that start higher, the stream stores, are in test_cpu_large_output).
    for (std::uint64_t n : {0ull, 1ull, 7ull, 4097ull, (1ull << 18) + 3}) {
      const std::uint64_t rows = n == 4097 ? 17 : n == (1ull << 18) + 3 ? 1 : n;
      const tensor x(gc::test::gaussian(n, n + 1), type, rows);
      auto want = gc::test::encode_vec(spec, ctx, x.cview(), gc::backend::reference);
      ASSERT_TRUE(want.ok()) << want.error().message();
      tensor acc0(gc::test::gaussian(n, 5), type, rows);
      tensor ref_dec = tensor::zeros(n, type, rows), ref_acc = acc0;
      ASSERT_TRUE(gc::test::decode_vec(want.value(), ref_dec.mview(), gc::backend::reference).ok());
      ASSERT_TRUE(
          gc::test::decode_vec(want.value(), ref_acc.mview(), gc::backend::reference, true, -0.5f)
              .ok());
      for (int threads : {1, 2, 3}) {
        for (std::size_t offset :
             {std::size_t{0}, std::size_t{4}, std::size_t{type != gc::dtype::f32 ? 2u : 8u}}) {
          SCOPED_TRACE(std::string(gc::dtype_name(type)) + " n=" + std::to_string(n) +
                       " threads=" + std::to_string(threads) + " offset=" + std::to_string(offset));
          shifted in(x, offset);
          const auto got = encode_on(spec, ctx, in.v, gc::backend::cpu, threads);
          ASSERT_EQ(got, want.value());

          shifted dec(tensor::zeros(n, type, rows), offset), acc(acc0, offset);
          ASSERT_TRUE(decode_into(got, dec.v, false, -0.5f, gc::backend::cpu, threads).ok());
          ASSERT_EQ(dec.bytes(), ref_dec.bytes);
          ASSERT_TRUE(decode_into(got, acc.v, true, -0.5f, gc::backend::cpu, threads).ok());
          ASSERT_EQ(acc.bytes(), ref_acc.bytes);
        }
      }
    }
  }
}

// Fused error feedback (every codec has one on the CPU) gives the frame and the residual of
// the reference's generic composition, for gradient and residual dtypes alike or mixed.
TEST_P(CpuMatchesReference, FusedFeedbackEqualsGenericComposition) {
  const auto spec = gc::parse_spec(GetParam().spec).value();
  const gc::context ctx{3, 5, 8};
  for (const auto& [gt, et] : gc::test::kFeedbackTypes) {
    for (std::uint64_t n : {0ull, 1ull, 7ull, 4097ull, (1ull << 18) + 3}) {
      const std::uint64_t rows = n == 4097 ? 17 : n == (1ull << 18) + 3 ? 1 : n;
      const tensor g(gc::test::gaussian(n, n + 2), gt, rows);
      const tensor e0(gc::test::gaussian(n, n + 3, 0.25f), et, rows);
      expect_cpu_feedback_matches_reference(spec, ctx, g, e0);
      if (HasFatalFailure()) return;
    }
  }
}

// NaNs with different signs and payloads, signalling ones among them, in the gradient and in
// the residual, at some elements in both: the CPU puts the reference's NaN bits on the wire
// and in the residual (docs/guarantees.md: the first NaN operand of g + e wins, quieted).
TEST_P(CpuMatchesReference, NaNPayloadsKeepTheReferenceBits) {
  const auto spec = gc::parse_spec(GetParam().spec).value();
  const gc::context ctx{3, 5, 8};
  for (std::uint64_t n : {7ull, 4097ull}) {
    const std::uint64_t rows = n == 4097 ? 17 : n;
    for (auto type : {gc::dtype::f32, gc::dtype::f16, gc::dtype::bf16})
      for (int threads : {1, 2}) {
        const tensor x(with_nan_payloads(n, n + 1, 3), type, rows);
        expect_cpu_matches_reference(GetParam().spec, ctx, x, threads, {gc::dtype::f32}, 0.5f);
        if (HasFatalFailure()) return;
      }
    for (const auto& [gt, et] : gc::test::kFeedbackTypes) {
      const tensor g(with_nan_payloads(n, n + 2, 3), gt, rows);
      const tensor e0(with_nan_payloads(n, n + 3, 5, 0, 0.25f), et, rows);
      expect_cpu_feedback_matches_reference(spec, ctx, g, e0);
      if (HasFatalFailure()) return;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllIsas, CpuMatchesReference, testing::ValuesIn(all_params()), name_of);

TEST(CpuIsa, SelectionAndNames) {
  // A build with every variant (the default) always has the scalar one; sanitizer stages
  // may build fewer (GRADCODEC_CPU_ISAS).
  EXPECT_TRUE(gc::cpu_isa_supported(gc::cpu_isa::scalar) || GRADCODEC_TEST_PARTIAL_ISAS);
  EXPECT_TRUE(gc::cpu_isa_supported(gc::cpu_isa_best()));
  EXPECT_EQ(gc::cpu_isa_from_name("avx2").value(), gc::cpu_isa::avx2);
  EXPECT_FALSE(gc::cpu_isa_from_name("sse9").ok());
  for (auto isa : {gc::cpu_isa::scalar, gc::cpu_isa::avx2, gc::cpu_isa::avx512}) {
    if (gc::cpu_isa_supported(isa)) {
      ASSERT_TRUE(gc::set_cpu_isa(isa).ok());
      EXPECT_EQ(gc::cpu_isa_active(), isa);
    } else {
      const gc::status st = gc::set_cpu_isa(isa);
      EXPECT_EQ(st.code(), gc::status_code::backend_unavailable) << st.message();
    }
  }
  ASSERT_TRUE(gc::set_cpu_isa(gc::cpu_isa_best()).ok());
}

}  // namespace
