// SPDX-License-Identifier: Apache-2.0
// The prepared encode (prepare_encode, then encode or encode_with_feedback with it): the same
// bytes and residuals as the one-shot calls for every codec, the workspace workspace_size()
// reports, and calls on another shape or operation refused before anything is written.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <string>
#include <vector>

#include "gradcodec/gradcodec.hpp"
#include "support/specs.hpp"

namespace gc = gradcodec;

namespace {

std::vector<float> gradient(std::uint64_t n) {
  std::vector<float> g(n);
  for (std::uint64_t i = 0; i < n; ++i)
    g[i] = std::sin(0.37f * static_cast<float>(i)) * (1.0f + static_cast<float>(i % 7));
  return g;
}

constexpr std::uint64_t kRows = 24;  // rows of every tensor here (PowerSGD, fp8row)
constexpr std::uint64_t kN = kRows * 40;

gc::const_tensor_view view_of(const std::vector<float>& v) {
  return {v.data(), v.size(), gc::dtype::f32, kRows};
}

}  // namespace

TEST(PreparedEncode, GivesTheBytesAndResidualsOfTheOneShotCalls) {
  const gc::context ctx{11, 3, 5};
  const auto g = gradient(kN);
  for (const char* text : gc::test::kSpecs) {
    SCOPED_TRACE(text);
    const auto spec = gc::parse_spec(text).value();
    const std::size_t cap = gc::encode_bound(spec, kN, gc::dtype::f32, kRows);
    for (const auto op : {gc::operation::encode, gc::operation::encode_with_feedback}) {
      const bool feedback = op == gc::operation::encode_with_feedback;
      auto prepared = gc::prepare_encode(spec, view_of(g), op);
      ASSERT_TRUE(prepared.ok()) << prepared.error().message();
      const auto& p = prepared.value();
      EXPECT_EQ(p.spec(), spec);
      EXPECT_EQ(p.op(), op);
      EXPECT_NE(p.where(), gc::backend::automatic);
      EXPECT_EQ(p.workspace_bytes(), gc::workspace_size(spec, view_of(g), op).value());

      std::vector<std::byte> ws(p.workspace_bytes()), one(cap), two(cap);
      std::vector<float> res_one(kN, 0.25f), res_two(kN, 0.25f);
      gc::exec_options opt;
      opt.workspace = {ws.data(), ws.size()};
      const gc::tensor_view r1{res_one.data(), kN, gc::dtype::f32, kRows};
      const gc::tensor_view r2{res_two.data(), kN, gc::dtype::f32, kRows};
      const auto a = feedback ? gc::encode_with_feedback(spec, ctx, view_of(g), r1, {one}, opt)
                              : gc::encode(spec, ctx, view_of(g), {one}, opt);
      // Twice with one preparation: nothing in it is consumed by a call.
      for (int call = 0; call < 2; ++call) {
        std::fill(res_two.begin(), res_two.end(), 0.25f);
        const auto b = feedback ? gc::encode_with_feedback(p, ctx, view_of(g), r2, {two}, opt)
                                : gc::encode(p, ctx, view_of(g), {two}, opt);
        ASSERT_TRUE(a.ok() && b.ok()) << (a.ok() ? b.error().message() : a.error().message());
        ASSERT_EQ(a.value(), b.value());
        EXPECT_EQ(0, std::memcmp(one.data(), two.data(), a.value()));
        EXPECT_EQ(0, std::memcmp(res_one.data(), res_two.data(), kN * sizeof(float)));
      }
    }
  }
}

TEST(PreparedEncode, RefusesAnotherShapeOrOperationWithoutWriting) {
  const auto spec = gc::parse_spec("minmax:bits=4").value();
  const auto g = gradient(kN);
  const auto enc = gc::prepare_encode(spec, view_of(g), gc::operation::encode).value();
  const auto fb = gc::prepare_encode(spec, view_of(g), gc::operation::encode_with_feedback).value();
  std::vector<std::byte> ws(std::max(enc.workspace_bytes(), fb.workspace_bytes()) + 1);
  gc::exec_options opt;
  opt.workspace = {ws.data(), ws.size()};
  std::vector<std::byte> out(gc::encode_bound(spec, 2 * kN), std::byte{0x5A});
  const std::vector<std::byte> untouched = out;
  std::vector<float> residual(2 * kN, 1.0f);
  const auto g2 = gradient(2 * kN);

  const gc::const_tensor_view longer{g2.data(), 2 * kN, gc::dtype::f32, kRows};
  const gc::const_tensor_view other_rows{g.data(), kN, gc::dtype::f32, kRows / 2};
  const std::vector<std::uint16_t> half(kN);
  const gc::const_tensor_view other_type{half.data(), kN, gc::dtype::bf16, kRows};
  for (const auto& in : {longer, other_rows, other_type}) {
    auto r = gc::encode(enc, {}, in, {out}, opt);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.error().code(), gc::status_code::shape_mismatch) << r.error().message();
  }
  const gc::tensor_view res{residual.data(), kN, gc::dtype::f32, kRows};
  // The operation it was prepared for, and only that one.
  auto wrong_op = gc::encode(fb, {}, view_of(g), {out}, opt);
  ASSERT_FALSE(wrong_op.ok());
  EXPECT_NE(std::string(wrong_op.error().message()).find("prepared for encode_with_feedback"),
            std::string::npos)
      << wrong_op.error().message();
  wrong_op = gc::encode_with_feedback(enc, {}, view_of(g), res, {out}, opt);
  ASSERT_FALSE(wrong_op.ok());
  EXPECT_NE(std::string(wrong_op.error().message()).find("prepared for encode"), std::string::npos);
  // A default-constructed one was never prepared.
  auto never = gc::encode(gc::prepared_encode{}, {}, view_of(g), {out}, opt);
  ASSERT_FALSE(never.ok());
  EXPECT_NE(std::string(never.error().message()).find("never prepared"), std::string::npos);
  EXPECT_EQ(out, untouched);
  EXPECT_EQ(residual, std::vector<float>(2 * kN, 1.0f));
}

TEST(PreparedEncode, PreparingChecksWhatWorkspaceSizeChecks) {
  const gc::const_tensor_view shape{nullptr, kN, gc::dtype::f32, kRows};
  auto bad = gc::parse_spec("minmax").value();
  bad.bits = 99;
  const auto a = gc::prepare_encode(bad, shape, gc::operation::encode);
  const auto b = gc::workspace_size(bad, shape, gc::operation::encode);
  ASSERT_FALSE(a.ok());
  ASSERT_FALSE(b.ok());
  EXPECT_STREQ(a.error().message(), b.error().message());
  const auto spec = gc::parse_spec("minmax").value();
  // Rows that do not divide n: refused when preparing, not at the first call.
  const auto rows =
      gc::prepare_encode(spec, {nullptr, kN, gc::dtype::f32, 7}, gc::operation::encode);
  ASSERT_FALSE(rows.ok());
  EXPECT_NE(std::string(rows.error().message()).find("rows do not divide n"), std::string::npos);
  const auto decode = gc::prepare_encode(spec, shape, gc::operation::decode);
  ASSERT_FALSE(decode.ok());
  EXPECT_EQ(decode.error().code(), gc::status_code::invalid_argument);
  // The backend is chosen when preparing: opt.where of a later call is not consulted.
  gc::exec_options ref;
  ref.where = gc::backend::reference;
  const auto p = gc::prepare_encode(spec, shape, gc::operation::encode, ref).value();
  EXPECT_EQ(p.where(), gc::backend::reference);
}
