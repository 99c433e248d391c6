// SPDX-License-Identifier: Apache-2.0
// decode_expected on the host backends: for every codec it decodes what decode decodes,
// bit for bit, and its verdicts on damaged frames are the same on every backend, with the
// output untouched. (tests/cuda/test_cuda_expected.cpp runs the same on the GPU.)
#include <gtest/gtest.h>

#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "gradcodec/expected_decode.hpp"
#include "support/codec_cases.hpp"
#include "support/data.hpp"
#include "support/frame_damage.hpp"

namespace gc = gradcodec;
using gc::test::tensor;

namespace {

constexpr gc::context kCtx{42, 3, 5};
constexpr std::uint64_t kDamagedN = 4097;

std::vector<gc::backend> host_backends() {
  std::vector<gc::backend> b{gc::backend::reference};
  if (gc::backend_available(gc::backend::cpu)) b.push_back(gc::backend::cpu);
  return b;
}

using gc::test::rows_for;

tensor input(std::uint64_t n, gc::dtype t, std::uint64_t seed) {
  return tensor(gc::test::gaussian(n, seed), t, rows_for(n));
}

std::vector<std::byte> encode_ok(const std::string& text, const tensor& in) {
  auto spec = gc::parse_spec(text);
  EXPECT_TRUE(spec.ok());
  auto f = gc::test::encode_vec(spec.value(), kCtx, in.cview());
  EXPECT_TRUE(f.ok()) << text << ": " << f.error().message();
  return f.ok() ? f.value() : std::vector<std::byte>{};
}

gc::frame_header header_of(const std::vector<std::byte>& frame) {
  auto h = gc::peek(frame);
  EXPECT_TRUE(h.ok()) << h.error().message();
  return h.ok() ? h.value() : gc::frame_header{};
}

struct outcome {
  gc::status st;
  gc::frame_verdict verdict;
  tensor out;
};

//! decode_expected (or its accumulate form) on backend `where` into `out`, the verdict
//! poisoned first so that a call that does not write it shows.
outcome run(gc::backend where, const gc::frame_header& expected, gc::const_bytes frame, tensor out,
            bool accumulate = false, float alpha = 1.0f) {
  gc::exec_options opt{where};
  auto ws_size = gc::workspace_size(
      gc::spec_of(expected), out.cview(),
      accumulate ? gc::operation::decode_accumulate : gc::operation::decode, opt);
  EXPECT_TRUE(ws_size.ok());
  std::vector<std::byte> ws(ws_size.ok() ? ws_size.value() : 0);
  opt.workspace = ws;
  gc::frame_verdict v{0xDEADu, 0xDEADu, 0xDEADu};
  const gc::status st =
      accumulate ? gc::decode_accumulate_expected(expected, frame, out.mview(), alpha, &v, opt)
                 : gc::decode_expected(expected, frame, out.mview(), &v, opt);
  return {st, v, out};
}

//! An output whose every byte is 0xA5, to see that a refused frame writes nothing.
tensor poisoned(std::uint64_t n, gc::dtype t, std::uint64_t rows) {
  tensor o = tensor::zeros(n, t, rows);
  std::memset(o.bytes.data(), 0xA5, o.bytes.size());
  return o;
}

gc::verdict_code code_of(const gc::frame_verdict& v) {
  return static_cast<gc::verdict_code>(v.code);
}

using param = gc::test::codec_case;

class ExpectedDecode : public testing::TestWithParam<param> {};

// The frame of another input (another count for threshold and dgc, maybe the non-finite
// flag) decodes against the header of the first, exactly as decode does, on every host
// backend, for decode and decode-accumulate.
TEST_P(ExpectedDecode, EqualsDecodeForEveryFrameOfTheSameCodec) {
  const auto& p = GetParam();
  const tensor first = input(p.n, p.type, 7);
  tensor second = input(p.n, p.type, 8);
  for (std::uint64_t i = 0; i < p.n; i += 3) second.set(i, second.get(i) * 4.0f);
  if (p.n > 5) second.set(5, std::numeric_limits<float>::infinity());
  const gc::frame_header expected = header_of(encode_ok(p.spec, first));
  const auto frame = encode_ok(p.spec, second);

  for (gc::backend where : host_backends()) {
    SCOPED_TRACE(std::string(gc::backend_name(where)));
    for (bool accumulate : {false, true}) {
      tensor want = gc::test::tensor(gc::test::gaussian(p.n, 9), gc::dtype::f32, rows_for(p.n));
      tensor start = want;
      ASSERT_TRUE(gc::test::decode_vec(frame, want.mview(), where, accumulate, 0.5f).ok());
      const outcome got = run(where, expected, frame, start, accumulate, 0.5f);
      ASSERT_TRUE(got.st.ok()) << got.st.message();
      EXPECT_EQ(got.verdict.code, 0u);
      EXPECT_EQ(got.verdict.count, header_of(frame).count);
      EXPECT_EQ(got.out.bytes, want.bytes) << "accumulate " << accumulate;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Codecs, ExpectedDecode, testing::ValuesIn(gc::test::every_codec_case()),
                         gc::test::codec_case_name);

class ExpectedDecodeDamage : public testing::TestWithParam<const char*> {};

// Every backend gives the listed verdict, the same status, and leaves the output as it was.
TEST_P(ExpectedDecodeDamage, EachDamageHasItsVerdictAndWritesNothing) {
  const tensor in = input(kDamagedN, gc::dtype::f32, 11);
  const auto frame = encode_ok(GetParam(), in);
  const gc::frame_header expected = header_of(frame);
  for (const auto& d : gc::test::damaged_frames(frame))
    for (gc::backend where : host_backends())
      for (bool accumulate : {false, true}) {
        SCOPED_TRACE(d.what + " on " + std::string(gc::backend_name(where)));
        const tensor before = poisoned(in.n, gc::dtype::f32, in.rows);
        const outcome got = run(where, expected, d.bytes, before, accumulate);
        EXPECT_FALSE(got.st.ok());
        EXPECT_EQ(code_of(got.verdict), d.want) << got.st.message();
        if (d.want == gc::verdict_code::unexpected_field || d.want == gc::verdict_code::bad_count ||
            d.want == gc::verdict_code::size_mismatch) {
          EXPECT_EQ(got.verdict.field, d.field);
        }
        EXPECT_EQ(gc::verdict_status(got.verdict).code(), got.st.code());
        EXPECT_EQ(got.out.bytes, before.bytes) << "a refused frame wrote to the output";
      }
}

TEST_P(ExpectedDecodeDamage, TheNonFiniteFlagMayDiffer) {
  const tensor in = input(kDamagedN, gc::dtype::f32, 11);
  const auto frame = encode_ok(GetParam(), in);
  const auto flagged = gc::test::flagged_nonfinite(frame);
  for (gc::backend where : host_backends()) {
    const outcome got =
        run(where, header_of(frame), flagged, poisoned(in.n, gc::dtype::f32, in.rows));
    EXPECT_TRUE(got.st.ok()) << got.st.message();
    EXPECT_EQ(got.verdict.code, 0u);
  }
}

// threshold and dgc frames decode from a longer buffer (a capacity), the others do not.
TEST_P(ExpectedDecodeDamage, OnlyVaryingCountsMayComeInALongerBuffer) {
  const tensor in = input(kDamagedN, gc::dtype::f32, 11);
  const auto frame = encode_ok(GetParam(), in);
  const gc::frame_header expected = header_of(frame);
  const bool varies = gc::blocks::traits_of(expected.codec).count_from_data;
  for (gc::backend where : host_backends()) {
    tensor want = tensor::zeros(in.n, gc::dtype::f32, in.rows);
    ASSERT_TRUE(gc::test::decode_vec(frame, want.mview(), where).ok());
    const outcome got = run(where, expected, gc::test::in_longer_buffer(frame),
                            poisoned(in.n, gc::dtype::f32, in.rows));
    EXPECT_EQ(got.st.ok(), varies) << got.st.message();
    if (varies) {
      EXPECT_EQ(got.out.bytes, want.bytes);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Frames, ExpectedDecodeDamage, testing::ValuesIn(gc::test::kDamagedSpecs),
                         [](const testing::TestParamInfo<const char*>& p) {
                           std::string s = p.param;
                           for (auto& c : s)
                             if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
                           return s;
                         });

// A field that must equal the expected one names itself in the verdict and the message.
TEST(ExpectedDecodeFields, ParameterChangesAreUnexpectedFields) {
  const tensor in = input(4097, gc::dtype::f32, 3);
  const auto qsgd7 = encode_ok("qsgd:levels=7", in);
  const auto qsgd15 = encode_ok("qsgd:levels=15", in);
  const auto bucket = encode_ok("qsgd:levels=7,bucket=256", in);
  const gc::frame_header expected = header_of(qsgd7);
  for (gc::backend where : host_backends()) {
    const outcome a = run(where, expected, qsgd15, poisoned(4097, gc::dtype::f32, 17));
    EXPECT_EQ(code_of(a.verdict), gc::verdict_code::unexpected_field);
    EXPECT_EQ(a.verdict.field, 36u);  // level
    EXPECT_NE(std::string(a.st.message()).find("'level'"), std::string::npos) << a.st.message();
    const outcome b = run(where, expected, bucket, poisoned(4097, gc::dtype::f32, 17));
    EXPECT_EQ(code_of(b.verdict), gc::verdict_code::unexpected_field);
    EXPECT_EQ(b.verdict.field, 32u);  // group
  }
}

// Argument errors return before anything is checked or written: the verdict stays as it was.
TEST(ExpectedDecodeFields, ArgumentErrorsLeaveTheVerdictAlone) {
  const tensor in = input(64, gc::dtype::f32, 3);
  const auto frame = encode_ok("topk:ratio=0.1", in);
  const gc::frame_header expected = header_of(frame);
  tensor out = tensor::zeros(64, gc::dtype::f32);

  gc::frame_verdict v{77, 77, 77};
  EXPECT_EQ(gc::decode_expected(expected, frame, out.mview(), nullptr).code(),
            gc::status_code::invalid_argument);

  gc::frame_header broken = expected;
  broken.payload_bytes += 16;  // not what its fields imply
  EXPECT_EQ(gc::decode_expected(broken, frame, out.mview(), &v).code(),
            gc::status_code::invalid_argument);
  EXPECT_EQ(v.code, 77u);

  broken = expected;
  broken.count = 0;  // a topk frame of 64 elements carries some
  broken.payload_bytes = 0;
  EXPECT_EQ(gc::decode_expected(broken, frame, out.mview(), &v).code(),
            gc::status_code::invalid_argument);
  EXPECT_EQ(v.code, 77u);

  tensor shorter = tensor::zeros(63, gc::dtype::f32);
  EXPECT_EQ(gc::decode_expected(expected, frame, shorter.mview(), &v).code(),
            gc::status_code::shape_mismatch);
  EXPECT_EQ(v.code, 77u);

  // The verdict may not live inside the frame or the output.
  auto copy = frame;
  copy.resize(copy.size() + 32);
  auto* inside = reinterpret_cast<gc::frame_verdict*>(copy.data() + frame.size());
  EXPECT_EQ(gc::decode_expected(expected, {copy.data(), copy.size()}, out.mview(), inside).code(),
            gc::status_code::invalid_argument);
  EXPECT_EQ(gc::decode_expected(expected, frame, out.mview(),
                                reinterpret_cast<gc::frame_verdict*>(out.bytes.data()))
                .code(),
            gc::status_code::invalid_argument);
}

TEST(ExpectedDecodeFields, VerdictStatusNamesEveryCode) {
  for (std::uint32_t c = 1; c <= 8; ++c) {
    const gc::status st = gc::verdict_status({c, 8, 0});
    EXPECT_FALSE(st.ok());
    EXPECT_GT(std::strlen(st.message()), 10u);
  }
  EXPECT_TRUE(gc::verdict_status({}).ok());
  EXPECT_EQ(gc::verdict_status({3, 0, 0}).code(), gc::status_code::unsupported_version);
  EXPECT_FALSE(gc::verdict_status({99, 0, 0}).ok());
}

}  // namespace
