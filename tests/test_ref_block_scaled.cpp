// SPDX-License-Identifier: Apache-2.0
// The reference block-scaled codecs against frames derived by hand from docs/codecs.md
// "Block-scaled codecs" and docs/format.md: E8M0 scale codes, element codes, the layout,
// a non-finite block, an fp8row matrix, and a rotation that the decoder inverts exactly
// from the key in the frame. (The element conversions are checked exhaustively against
// ml_dtypes by python_bindings/tests/test_mx_formats.py.)
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "support/data.hpp"

namespace gc = gradcodec;

namespace {

constexpr gc::context kCtx{42, 3, 5};

struct encoded {
  gc::frame_header h;
  std::vector<std::uint8_t> payload;
  std::vector<float> decoded;
};

encoded run(const std::string& text, const std::vector<float>& v, std::uint64_t rows = 0) {
  const gc::codec_spec s = gc::parse_spec(text).value();
  auto f = gc::test::encode_vec(s, kCtx,
                                gc::const_tensor_view{v.data(), v.size(), gc::dtype::f32, rows});
  EXPECT_TRUE(f.ok()) << text << ": " << f.error().message();
  encoded e;
  e.h = gc::peek(f.value()).value();
  for (std::size_t i = gc::header_bytes; i < f.value().size(); ++i)
    e.payload.push_back(static_cast<std::uint8_t>(f.value()[i]));
  e.decoded.assign(v.size(), -7.0f);
  EXPECT_TRUE(gc::test::decode_vec(f.value(), gc::view(e.decoded)).ok());
  return e;
}

std::vector<std::uint8_t> bytes(std::initializer_list<int> b, std::size_t total) {
  std::vector<std::uint8_t> out(total, 0);
  std::size_t i = 0;
  for (int x : b) out[i++] = static_cast<std::uint8_t>(x);
  return out;
}

TEST(RefBlockScaled, Mxfp8E4m3KnownFrame) {
  // amax 3 = 1.5 * 2^1: scale code 1 - 8 + 127 = 120; r = v * 2^7 = 128, -96, 12.8, 384
  // -> e4m3 codes 0x70, 0xEC (sign | 1.5 * 2^6), 0x55 (12.8 -> 13 = 1.625 * 2^3), 0x7C.
  const encoded e = run("mxfp8:block=4", {1.0f, -0.75f, 0.1f, 3.0f});
  EXPECT_EQ(e.h.group, 4u);
  EXPECT_EQ(e.h.level, 1u);
  EXPECT_EQ(e.h.mode, 0u);
  std::vector<std::uint8_t> want = bytes({0x78}, 32);
  want[16] = 0x70;
  want[17] = 0xEC;
  want[18] = 0x55;
  want[19] = 0x7C;
  EXPECT_EQ(e.payload, want);
  EXPECT_EQ(e.decoded, (std::vector<float>{1.0f, -0.75f, 13.0f / 128, 3.0f}));
}

TEST(RefBlockScaled, Mxint8KnownFrame) {
  // amax 1: scale code 127 (2^0); r * 64 = 19.2 -> 19, -64 -> 0xC0 (two's complement).
  const encoded e = run("mxint8:block=2", {0.3f, -1.0f});
  EXPECT_EQ(e.payload,
            (std::vector<std::uint8_t>{0x7F, 0,    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                                       0x13, 0xC0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}));
  EXPECT_EQ(e.decoded, (std::vector<float>{19.0f / 64, -1.0f}));
}

TEST(RefBlockScaled, NonFiniteBlockIsNaNOthersAreKept) {
  // Block 0 holds NaN: scale 0xFF, codes 0. Block 1: amax 2, scale code 1 - 2 + 127 = 126,
  // r = 4 and 1 -> e2m1 codes 6 and 2, packed LSB first: byte 1 = 0x26.
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const encoded e = run("mxfp4:block=2", {nan, 1.0f, 2.0f, 0.5f});
  EXPECT_EQ(e.h.flags & gc::flag_nonfinite, gc::flag_nonfinite);
  std::vector<std::uint8_t> want = bytes({0xFF, 126}, 32);
  want[17] = 0x26;
  EXPECT_EQ(e.payload, want);
  EXPECT_TRUE(std::isnan(e.decoded[0]) && std::isnan(e.decoded[1]));
  EXPECT_EQ(e.decoded[2], 2.0f);
  EXPECT_EQ(e.decoded[3], 0.5f);
}

TEST(RefBlockScaled, Fp8RowScalesEachRowOfTheMatrix) {
  // 2 x 2: row 0's encode multiplier t = 448 / 2 maps -2 to -448 (0xFE) and 1 to 224
  // (0x76), decoded times 1 / t; the zero row stores the cap 2^126 and codes 0.
  const encoded e = run("fp8row", {1.0f, -2.0f, 0.0f, 0.0f}, 2);
  EXPECT_EQ(e.h.group, 2u);
  float got_scales[2];
  std::memcpy(got_scales, e.payload.data(), 8);
  EXPECT_EQ(got_scales[0], 224.0f);
  EXPECT_EQ(got_scales[1], 0x1p126f);
  EXPECT_EQ(e.payload[16], 0x76);
  EXPECT_EQ(e.payload[17], 0xFE);
  EXPECT_EQ(e.payload[18], 0);
  const float d = 1.0f / 224.0f;
  EXPECT_EQ(e.decoded, (std::vector<float>{224.0f * d, -448.0f * d, 0.0f, 0.0f}));
}

TEST(RefBlockScaled, Fp8RowMultipliesByTheStoredScale) {
  // w * t rounds to 200, the midpoint of e4m3's 192 and 208, so it ties to 192 (0x74);
  // w / (amax / 448) would round to 200.00002 and code 208 (0x75).
  const encoded e = run("fp8row", {2.1981685f, 0.98132527f}, 1);
  const float t = 448.0f / 2.1981685f;
  ASSERT_EQ(0.98132527f * t, 200.0f);
  ASSERT_GT(0.98132527f / (2.1981685f / 448.0f), 200.0f);
  float got;
  std::memcpy(&got, e.payload.data(), 4);
  EXPECT_EQ(got, t);
  EXPECT_EQ(e.payload[17], 0x74);
}

TEST(RefBlockScaled, RotationTravelsWithItsKeyAndIsInvertedExactly) {
  // A block of four ones rotates to multiples of 1/2 in [-1, 1], which e4m3 holds exactly
  // under any scale the block gets: decoding undoes the rotation bit for bit. The payload
  // starts with the context's key material: k0 = seed, k1 = 0, step, tensor id.
  const encoded e = run("mxfp8:block=4,rotate=1", {1.0f, 1.0f, 1.0f, 1.0f});
  EXPECT_EQ(e.h.mode, gc::mode_rotate);
  EXPECT_EQ(std::vector<std::uint8_t>(e.payload.begin(), e.payload.begin() + 16),
            bytes({42, 0, 0, 0, 0, 0, 0, 0, 3, 0, 0, 0, 5, 0, 0, 0}, 16));
  EXPECT_EQ(e.decoded, (std::vector<float>{1.0f, 1.0f, 1.0f, 1.0f}));
  // Without the rotation the same block is one scale and four equal codes.
  const encoded plain = run("mxfp8:block=4", {1.0f, 1.0f, 1.0f, 1.0f});
  EXPECT_NE(std::vector<std::uint8_t>(e.payload.begin() + 32, e.payload.begin() + 36),
            std::vector<std::uint8_t>(plain.payload.begin() + 16, plain.payload.begin() + 20));
}

}  // namespace
