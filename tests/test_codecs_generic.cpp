// SPDX-License-Identifier: Apache-2.0
// Properties every codec must have, checked for every codec x dtype x size on the reference
// backend: sizes, determinism, decode-accumulate, error feedback, non-finite visibility, and
// decoders that reject damaged frames without writing outside their output.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>

#include "gradcodec/blocks/codec_traits.hpp"
#include "support/codec_cases.hpp"
#include "support/data.hpp"
#include "support/specs.hpp"

namespace gc = gradcodec;
using gc::test::tensor;

namespace {

using gc::test::kSpecs;

using param = gc::test::codec_case;
using gc::test::rows_for;

class EveryCodec : public testing::TestWithParam<param> {
 protected:
  gc::codec_spec spec() const {
    auto s = gc::parse_spec(GetParam().spec);
    EXPECT_TRUE(s.ok()) << s.error().message();
    return s.value();
  }
  tensor input(std::uint64_t seed = 7) const {
    return tensor(gc::test::gaussian(GetParam().n, seed), GetParam().type, rows_for(GetParam().n));
  }
  static constexpr gc::context ctx{42, 3, 5};
};

TEST_P(EveryCodec, SizeIsTheBoundAndDeterministic) {
  const auto s = spec();
  const tensor x = input();
  auto a = gc::test::encode_vec(s, ctx, x.cview());
  ASSERT_TRUE(a.ok()) << a.error().message();
  auto b = gc::test::encode_vec(s, ctx, x.cview());
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(a.value(), b.value()) << "same context must give identical bytes";
  const auto bound = gc::encode_bound(s, x.n, x.type, x.rows);
  EXPECT_LE(a.value().size(), bound);
  if (s.id != gc::codec_id::threshold) {
    EXPECT_EQ(a.value().size(), bound);
  }
  auto h = gc::peek(a.value());
  ASSERT_TRUE(h.ok()) << h.error().message();
  EXPECT_EQ(h.value().frame_bytes(), a.value().size());
  EXPECT_EQ(h.value().n, x.n);
  EXPECT_EQ(h.value().codec, s.id);
  EXPECT_EQ(h.value().type, x.type);
  // The header describes the spec well enough to rebuild it for decoding.
  EXPECT_EQ(gc::spec_of(h.value()).id, s.id);
}

TEST_P(EveryCodec, DecodesIntoEveryDtypeConsistently) {
  const auto s = spec();
  const tensor x = input();
  auto f = gc::test::encode_vec(s, ctx, x.cview());
  ASSERT_TRUE(f.ok()) << f.error().message();
  tensor y32 = tensor::zeros(x.n, gc::dtype::f32, x.rows);
  ASSERT_TRUE(gc::test::decode_vec(f.value(), y32.mview()).ok());
  for (auto t : {gc::dtype::f16, gc::dtype::bf16}) {
    tensor y = tensor::zeros(x.n, t, x.rows);
    ASSERT_TRUE(gc::test::decode_vec(f.value(), y.mview()).ok());
    for (std::uint64_t i = 0; i < x.n; ++i) {
      tensor r(std::vector<float>{y32.get(i)}, t);
      ASSERT_TRUE(gc::test::same_bits(y.get(i), r.get(0)) ||
                  (std::isnan(y.get(i)) && std::isnan(r.get(0))))
          << i;
    }
  }
}

TEST_P(EveryCodec, DecodeAccumulateIsFmaOfDecode) {
  const auto s = spec();
  const tensor x = input();
  auto f = gc::test::encode_vec(s, ctx, x.cview());
  ASSERT_TRUE(f.ok()) << f.error().message();
  tensor d = tensor::zeros(x.n, gc::dtype::f32, x.rows);
  ASSERT_TRUE(gc::test::decode_vec(f.value(), d.mview()).ok());
  const auto acc0 = gc::test::gaussian(x.n, 99);
  tensor acc(acc0, gc::dtype::f32, x.rows);
  const float alpha = 0.375f;
  ASSERT_TRUE(
      gc::test::decode_vec(f.value(), acc.mview(), gc::backend::reference, true, alpha).ok());
  for (std::uint64_t i = 0; i < x.n; ++i)
    ASSERT_TRUE(gc::test::same_bits(acc.get(i), std::fma(alpha, d.get(i), acc0[i]))) << i;
}

// Checked exactly for f32 gradients and residuals: f32 cases only.
class EveryCodecF32 : public EveryCodec {};

TEST_P(EveryCodecF32, ErrorFeedbackLeavesPMinusDecodedAndEncodesP) {
  const auto s = spec();
  const tensor g = input(11);
  tensor e(gc::test::gaussian(g.n, 12, 0.25f), gc::dtype::f32, g.rows);
  std::vector<float> p(g.n);
  for (std::uint64_t i = 0; i < g.n; ++i) p[i] = g.get(i) + e.get(i);

  gc::exec_options opt{gc::backend::reference};
  auto ws_size = gc::workspace_size(s, g.cview(), gc::operation::encode_with_feedback, opt);
  ASSERT_TRUE(ws_size.ok());
  std::vector<std::byte> ws(ws_size.value());
  opt.workspace = ws;
  std::vector<std::byte> frame(gc::encode_bound(s, g.n, g.type, g.rows));
  auto n = gc::encode_with_feedback(s, ctx, g.cview(), e.mview(), frame, opt);
  ASSERT_TRUE(n.ok()) << n.error().message();
  frame.resize(n.value());

  auto direct =
      gc::test::encode_vec(s, ctx, gc::const_tensor_view{p.data(), g.n, gc::dtype::f32, g.rows});
  ASSERT_TRUE(direct.ok());
  EXPECT_EQ(frame, direct.value()) << "error feedback must encode p = g + e";
  tensor d = tensor::zeros(g.n, gc::dtype::f32, g.rows);
  ASSERT_TRUE(gc::test::decode_vec(frame, d.mview()).ok());
  for (std::uint64_t i = 0; i < g.n; ++i)
    ASSERT_TRUE(gc::test::same_bits(e.get(i), p[i] - d.get(i))) << i;
}

// Needs a few elements: sizes 7 and 4097 only.
class EveryCodecSized : public EveryCodec {};

TEST_P(EveryCodecSized, NonFiniteInputStaysVisible) {
  const auto s = spec();
  float odd_nan;  // a NaN with the sign bit and a payload: decoders write the canonical NaN
  const std::uint32_t odd_nan_bits = 0xFFC01234u;
  std::memcpy(&odd_nan, &odd_nan_bits, 4);
  for (float bad :
       {std::numeric_limits<float>::quiet_NaN(), odd_nan, std::numeric_limits<float>::infinity(),
        -std::numeric_limits<float>::infinity()}) {
    for (std::uint64_t pos : {std::uint64_t{0}, GetParam().n - 1, std::uint64_t{512}}) {
      if (pos >= GetParam().n) continue;
      tensor x = input();
      x.set(pos, bad);
      auto f = gc::test::encode_vec(s, ctx, x.cview());
      ASSERT_TRUE(f.ok()) << f.error().message();
      tensor y = tensor::zeros(x.n, gc::dtype::f32, x.rows);
      ASSERT_TRUE(gc::test::decode_vec(f.value(), y.mview()).ok());
      bool seen = false;
      for (std::uint64_t i = 0; i < x.n; ++i) {
        seen |= !std::isfinite(y.get(i));
        ASSERT_TRUE(gc::test::same_bits(y.get(i), gc::test::as_decoded(y.get(i))))
            << "non-canonical NaN decoded at " << i;
      }
      // Accumulating into an output that holds the odd NaN: two NaN operands, one result
      // (random-k leaves an element it did not send as it was).
      const bool flagged = (gc::peek(f.value()).value().flags & gc::flag_nonfinite) != 0;
      if (s.id != gc::codec_id::randomk || flagged) {
        tensor acc = tensor::zeros(x.n, gc::dtype::f32, x.rows);
        acc.set(pos, odd_nan);
        ASSERT_TRUE(
            gc::test::decode_vec(f.value(), acc.mview(), gc::backend::reference, true, 0.5f).ok());
        EXPECT_TRUE(std::isnan(acc.get(pos)));
        for (std::uint64_t i = 0; i < x.n; ++i)
          ASSERT_TRUE(gc::test::same_bits(acc.get(i), gc::test::as_decoded(acc.get(i))))
              << "non-canonical NaN accumulated at " << i;
      }
      if (s.id == gc::codec_id::randomk) {
        // Random-k reads only the values it sends (docs/guarantees.md): visible when sent.
        EXPECT_EQ(seen, flagged);
      } else {
        EXPECT_TRUE(seen) << "value " << bad << " at " << pos << " vanished";
        EXPECT_TRUE(flagged);
      }
      // With nonfinite=error the encode refuses instead.
      auto strict = s;
      strict.nonfinite = gc::nonfinite_policy::error;
      auto r = gc::test::encode_vec(strict, ctx, x.cview());
      ASSERT_FALSE(r.ok());
      EXPECT_EQ(r.error().code(), gc::status_code::nonfinite_input);
    }
  }
}

TEST_P(EveryCodec, EncodeIntoOneByteShortBufferFailsCleanly) {
  const auto s = spec();
  const tensor x = input();
  auto f = gc::test::encode_vec(s, ctx, x.cview());
  ASSERT_TRUE(f.ok());
  gc::exec_options opt{gc::backend::reference};
  std::vector<std::byte> ws(gc::workspace_size(s, x.cview(), gc::operation::encode, opt).value());
  opt.workspace = ws;
  gc::test::guarded out(f.value().size() - 1);
  auto r = gc::encode(s, ctx, x.cview(), out.span(), opt);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code(), gc::status_code::output_too_small);
  EXPECT_TRUE(out.guards_intact());
}

//! Decodes `frame` into a guarded f32 output; returns the status and checks the guards.
gc::status guarded_decode(const std::vector<std::byte>& frame, std::uint64_t n, std::uint64_t rows,
                          bool* intact, bool* untouched) {
  gc::test::guarded out(n * 4);
  std::vector<std::byte> ws(1 << 20);
  gc::exec_options opt{gc::backend::reference, ws};
  auto h = gc::peek(frame);
  if (h.ok()) {
    auto need = gc::workspace_size(gc::spec_of(h.value()), {nullptr, n, gc::dtype::f32, rows},
                                   gc::operation::decode, opt);
    if (need.ok() && need.value() > ws.size()) ws.resize(need.value()), opt.workspace = ws;
  }
  auto st = gc::decode(frame, {out.data(), n, gc::dtype::f32, rows}, opt);
  *intact = out.guards_intact();
  *untouched = out.untouched();
  return st;
}

void rewrite_header(std::vector<std::byte>& frame, void (*edit)(gc::frame_header&)) {
  gc::frame_header h = gc::peek(frame).value();
  edit(h);
  gc::write_header(h, frame.data());
}

TEST_P(EveryCodec, DecoderRejectsDamagedFramesWithoutWritingOutside) {
  const auto s = spec();
  const tensor x = input();
  auto good = gc::test::encode_vec(s, ctx, x.cview());
  ASSERT_TRUE(good.ok()) << good.error().message();
  const auto& f = good.value();
  bool intact = false, untouched = false;

  // Truncated: every shorter length fails and writes nothing.
  const std::size_t step = std::max<std::size_t>(1, f.size() / 97);
  for (std::size_t len = 0; len < f.size(); len += step) {
    std::vector<std::byte> t(f.begin(), f.begin() + static_cast<std::ptrdiff_t>(len));
    EXPECT_FALSE(guarded_decode(t, x.n, x.rows, &intact, &untouched).ok()) << "length " << len;
    EXPECT_TRUE(untouched) << "length " << len;
  }
  // One byte too long.
  auto longer = f;
  longer.push_back(std::byte{0});
  EXPECT_EQ(guarded_decode(longer, x.n, x.rows, &intact, &untouched).code(),
            gc::status_code::corrupt_frame);
  EXPECT_TRUE(untouched);
  // Another format version.
  auto v2 = f;
  rewrite_header(v2, [](gc::frame_header& h) { h.version = 2; });
  EXPECT_EQ(guarded_decode(v2, x.n, x.rows, &intact, &untouched).code(),
            gc::status_code::unsupported_version);
  EXPECT_TRUE(untouched);
  // An oversized count (or a count where the codec has none), with a consistent payload size.
  auto big = f;
  rewrite_header(big, [](gc::frame_header& h) { h.count = h.n + 1; });
  EXPECT_FALSE(guarded_decode(big, x.n, x.rows, &intact, &untouched).ok());
  EXPECT_TRUE(untouched);
  // Output of the wrong length.
  gc::test::guarded small((x.n + 1) * 4);
  EXPECT_EQ(gc::decode(f, {small.data(), x.n + 1, gc::dtype::f32, 0}).code(),
            gc::status_code::shape_mismatch);
  EXPECT_TRUE(small.untouched());

  // Every bit flip in the header fails; flips in the payload may decode, but never write
  // outside the output.
  for (std::size_t bit = 0; bit < f.size() * 8;
       bit += (bit < gc::header_bytes * 8 ? 1 : 1 + f.size() / 64)) {
    auto flipped = f;
    flipped[bit / 8] ^= static_cast<std::byte>(1u << (bit % 8));
    const auto st = guarded_decode(flipped, x.n, x.rows, &intact, &untouched);
    if (bit < gc::header_bytes * 8) {
      EXPECT_FALSE(st.ok()) << "header bit " << bit;
      EXPECT_TRUE(untouched) << "header bit " << bit;
    }
    EXPECT_TRUE(intact) << "bit " << bit;
    if (!st.ok()) {
      EXPECT_TRUE(untouched) << "bit " << bit << ": " << st.message();
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Reference, EveryCodec, testing::ValuesIn(gc::test::every_codec_case()),
                         gc::test::codec_case_name);
INSTANTIATE_TEST_SUITE_P(Reference, EveryCodecF32,
                         testing::ValuesIn(gc::test::every_codec_case({gc::dtype::f32})),
                         gc::test::codec_case_name);
INSTANTIATE_TEST_SUITE_P(Reference, EveryCodecSized,
                         testing::ValuesIn(gc::test::every_codec_case(
                             {gc::dtype::f32, gc::dtype::f16, gc::dtype::bf16}, {7, 4097})),
                         gc::test::codec_case_name);

}  // namespace

// The traits the layers ask for (blocks/codec_traits.hpp) against what each codec's frames
// show, at its defaults on 4097 elements: a selecting codec decodes to its input or zero
// at every element, an indexed one spends a value and an index per kept element, a frame
// whose size follows the data changes size with the data (and only then), a bucketed
// codec has a bucket, and only a matrix codec's frame depends on the row count.
TEST(CodecTraits, MatchWhatTheFramesShow) {
  const std::uint64_t n = 4097;  // 17 x 241
  const std::vector<float> big = gc::test::gaussian(n, 1);
  std::vector<float> small(big);
  for (float& v : small) v *= 0.003f;
  const gc::context ctx{1, 2, 3};
  for (const gc::codec_info& c : gc::all_codecs()) {
    SCOPED_TRACE(std::string(c.name));
    const gc::blocks::codec_traits t = gc::blocks::traits_of(c.id);
    const gc::codec_spec s = gc::make_spec(c.id);
    const auto encode = [&](const std::vector<float>& x, std::uint64_t rows) {
      return gc::test::encode_vec(s, ctx, gc::const_tensor_view{x.data(), n, gc::dtype::f32, rows})
          .value();
    };
    const std::vector<std::byte> a = encode(big, 17), b = encode(small, 17);
    tensor d = tensor::zeros(n, gc::dtype::f32, 17);
    ASSERT_TRUE(gc::test::decode_vec(a, d.mview()).ok());
    bool subset = true;
    for (std::uint64_t i = 0; i < n; ++i)
      subset = subset && (d.get(i) == 0.0f || gc::test::same_bits(d.get(i), big[i]));
    EXPECT_EQ(t.selects, subset);
    const gc::frame_header h = gc::peek(a).value();
    EXPECT_EQ(t.indexed, t.selects && h.payload_bytes >= 8 * h.count);
    EXPECT_EQ(t.size_from_data, a.size() != b.size());
    bool has_bucket = false;
    for (const gc::param_info& p : c.params)
      has_bucket = has_bucket || p.key == "bucket" || p.key == "block";
    EXPECT_EQ(t.bucketed, has_bucket);
    EXPECT_EQ(t.by_rows, encode(big, 241) != a);
    EXPECT_EQ(t.matrix, t.by_rows && h.count == 17);
    // What the names promise of each other.
    EXPECT_TRUE(!t.size_from_data || t.count_from_data);
    EXPECT_TRUE(!(t.count_from_data || t.indexed) || t.selects);
  }
}
