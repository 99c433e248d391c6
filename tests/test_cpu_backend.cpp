// SPDX-License-Identifier: Apache-2.0
// The CPU backend against the reference oracle: for every ISA variant this machine runs,
// every codec, dtype, size, misaligned pointers and 1-3 threads, the encoded bytes and the
// decoded (and decode-accumulated) values are identical.
#include <gtest/gtest.h>

#include <cstring>
#include <string>

#include "gradcodec/cpu.hpp"
#include "support/data.hpp"
#include "support/specs.hpp"

namespace gc = gradcodec;
using gc::test::tensor;

namespace {

struct param {
  std::string spec;
  gc::cpu_isa isa;
};

std::vector<param> all_params() {
  std::vector<param> out;
  for (const char* s : gc::test::kSpecs) {
    const auto id = gc::parse_spec(s).value().id;
    // Codecs the CPU backend implements so far; the rest run on the reference.
    if (id != gc::codec_id::fp16 && id != gc::codec_id::bf16) continue;
    for (auto isa : {gc::cpu_isa::scalar, gc::cpu_isa::avx2, gc::cpu_isa::avx512})
      if (gc::cpu_isa_supported(isa)) out.push_back({s, isa});
  }
  return out;
}

std::string name_of(const testing::TestParamInfo<param>& p) {
  std::string s = p.param.spec + "_" + std::string(gc::cpu_isa_name(p.param.isa));
  for (auto& c : s)
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  return s;
}

//! A copy of t whose data starts `offset` bytes after a 64-byte boundary.
struct shifted {
  std::vector<std::byte> storage;
  gc::tensor_view v;
  shifted(const tensor& t, std::size_t offset) : storage(t.bytes.size() + 128) {
    auto base = reinterpret_cast<std::uintptr_t>(storage.data());
    auto* p = storage.data() + ((64 - base % 64) % 64) + offset;
    std::memcpy(p, t.bytes.data(), t.bytes.size());
    v = {p, t.n, t.type, t.rows};
  }
  std::vector<std::byte> bytes() const {
    auto* p = static_cast<const std::byte*>(v.data);
    return {p, p + v.n * gc::dtype_size(v.type)};
  }
};

class CpuMatchesReference : public testing::TestWithParam<param> {
 protected:
  void SetUp() override { ASSERT_TRUE(gc::set_cpu_isa(GetParam().isa).ok()); }
  void TearDown() override { (void)gc::set_cpu_isa(gc::cpu_isa_best()); }
};

TEST_P(CpuMatchesReference, BytesAndValuesAreIdentical) {
  const auto spec = gc::parse_spec(GetParam().spec).value();
  const gc::context ctx{7, 11, 13};
  for (auto type : {gc::dtype::f32, gc::dtype::f16, gc::dtype::bf16}) {
    for (std::uint64_t n : {0ull, 1ull, 7ull, 4097ull, (1ull << 20) + 3}) {
      const std::uint64_t rows = n == 4097 ? 17 : n == (1ull << 20) + 3 ? 1 : n;
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
          gc::exec_options opt{gc::backend::cpu};
          opt.threads = threads;
          std::vector<std::byte> ws(
              gc::workspace_size(spec, in.v, gc::operation::encode, opt).value());
          opt.workspace = ws;
          std::vector<std::byte> got(gc::encode_bound(spec, n, type, rows));
          auto w = gc::encode(spec, ctx, in.v, got, opt);
          ASSERT_TRUE(w.ok()) << w.error().message();
          got.resize(w.value());
          ASSERT_EQ(got, want.value());

          shifted dec(tensor::zeros(n, type, rows), offset), acc(acc0, offset);
          std::vector<std::byte> dws(1 << 16);
          opt.workspace = dws;
          ASSERT_TRUE(gc::decode(got, dec.v, opt).ok());
          ASSERT_EQ(dec.bytes(), ref_dec.bytes);
          ASSERT_TRUE(gc::decode_accumulate(got, acc.v, -0.5f, opt).ok());
          ASSERT_EQ(acc.bytes(), ref_acc.bytes);
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllIsas, CpuMatchesReference, testing::ValuesIn(all_params()), name_of);

TEST(CpuIsa, SelectionAndNames) {
  EXPECT_TRUE(gc::cpu_isa_supported(gc::cpu_isa::scalar));
  EXPECT_TRUE(gc::cpu_isa_supported(gc::cpu_isa_best()));
  EXPECT_EQ(gc::cpu_isa_from_name("avx2").value(), gc::cpu_isa::avx2);
  EXPECT_FALSE(gc::cpu_isa_from_name("sse9").ok());
  ASSERT_TRUE(gc::set_cpu_isa(gc::cpu_isa::scalar).ok());
  EXPECT_EQ(gc::cpu_isa_active(), gc::cpu_isa::scalar);
  ASSERT_TRUE(gc::set_cpu_isa(gc::cpu_isa_best()).ok());
}

}  // namespace
