// SPDX-License-Identifier: Apache-2.0
// Core pieces: spec strings, frame header checks, Philox known answers, half conversions,
// the canonical sum.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "gradcodec/blocks/float16.hpp"
#include "gradcodec/blocks/philox.hpp"
#include "gradcodec/gradcodec.hpp"
#include "reference/common.hpp"

namespace gc = gradcodec;

TEST(Spec, ParsesDefaultsAndParameters) {
  auto s = gc::parse_spec("qsgd:levels=7,bucket=512");
  ASSERT_TRUE(s.ok()) << s.error().message();
  EXPECT_EQ(s.value().id, gc::codec_id::qsgd);
  EXPECT_EQ(s.value().levels, 7u);
  EXPECT_EQ(s.value().bucket, 512u);
  EXPECT_EQ(s.value().rounding, gc::rounding_mode::stochastic);
  auto t = gc::parse_spec("topk");
  ASSERT_TRUE(t.ok());
  EXPECT_DOUBLE_EQ(t.value().ratio, 0.07);
}

TEST(Spec, RoundTripsEveryCodecThroughItsString) {
  for (const auto& c : gc::all_codecs()) {
    const auto spec = gc::make_spec(c.id);
    const std::string text = gc::to_string(spec);
    auto back = gc::parse_spec(text);
    ASSERT_TRUE(back.ok()) << text << ": " << back.error().message();
    EXPECT_EQ(back.value(), spec) << text;
  }
}

TEST(Spec, RejectsBadInputWithClearMessages) {
  struct bad_case {
    const char* text;
    const char* needle;
  };
  for (const auto& b : std::array<bad_case, 9>{{{"nosuch", "unknown codec 'nosuch'"},
                                                {"topk:ration=0.1", "unknown key 'ration'"},
                                                {"topk:ratio=2", "ratio must be in (0, 1]"},
                                                {"topk:ratio=abc", "bad value 'abc'"},
                                                {"qsgd:levels=0", "levels must be in 1..127"},
                                                {"minmax:bits=9", "bits must be in 1..8"},
                                                {"topk:", "empty parameter list"},
                                                {"topk:ratio", "expected key=value"},
                                                {"sign:scale=huge", "bad value 'huge'"}}}) {
    auto s = gc::parse_spec(b.text);
    ASSERT_FALSE(s.ok()) << b.text;
    EXPECT_EQ(s.error().code(), gc::status_code::invalid_spec);
    EXPECT_NE(std::string(s.error().message()).find(b.needle), std::string::npos)
        << b.text << " -> " << s.error().message();
  }
}

TEST(Frame, HeaderRoundTripsAndDetectsEverySingleBitFlip) {
  gc::frame_header h;
  h.codec = gc::codec_id::qsgd;
  h.n = 1000;
  h.group = 512;
  h.level = 7;
  h.mode = gc::mode_stochastic;
  h.payload_bytes = gc::expected_payload_bytes(h).value();
  std::array<std::byte, gc::header_bytes> buf{};
  gc::write_header(h, buf.data());
  auto back = gc::peek(buf);
  ASSERT_TRUE(back.ok()) << back.error().message();
  EXPECT_EQ(back.value().n, 1000u);
  EXPECT_EQ(back.value().payload_bytes, h.payload_bytes);
  for (std::size_t bit = 0; bit < gc::header_bytes * 8; ++bit) {
    auto flipped = buf;
    flipped[bit / 8] ^= static_cast<std::byte>(1u << (bit % 8));
    EXPECT_FALSE(gc::peek(flipped).ok()) << "bit " << bit;
  }
}

TEST(Frame, RejectsTruncatedAndWrongVersion) {
  gc::frame_header h;
  h.codec = gc::codec_id::fp16;
  h.n = 3;
  h.payload_bytes = gc::expected_payload_bytes(h).value();
  std::array<std::byte, gc::header_bytes> buf{};
  gc::write_header(h, buf.data());
  EXPECT_EQ(gc::peek(gc::const_bytes(buf.data(), 47)).error().code(),
            gc::status_code::corrupt_frame);
  h.version = 2;
  gc::write_header(h, buf.data());
  EXPECT_EQ(gc::peek(buf).error().code(), gc::status_code::unsupported_version);
}

// Known answers from the Random123 distribution (kat_vectors, philox4x32 10 rounds).
TEST(Philox, MatchesKnownAnswers) {
  using gradcodec::blocks::philox4x32_10;
  struct kat {
    std::array<std::uint32_t, 4> ctr;
    std::array<std::uint32_t, 2> key;
    std::array<std::uint32_t, 4> out;
  };
  const std::array<kat, 3> kats{{
      {{0, 0, 0, 0}, {0, 0}, {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
      {{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff},
       {0xffffffff, 0xffffffff},
       {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
      {{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344},
       {0xa4093822, 0x299f31d0},
       {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
  }};
  for (const auto& k : kats) {
    auto r = philox4x32_10({{k.ctr[0], k.ctr[1], k.ctr[2], k.ctr[3]}}, {k.key[0], k.key[1]});
    for (int i = 0; i < 4; ++i) EXPECT_EQ(r.v[i], k.out[i]);
  }
}

TEST(Half, F16ConversionMatchesIeeeRoundToNearestEven) {
  using namespace gradcodec::blocks;
  EXPECT_EQ(f32_to_f16(1.0f), 0x3C00);
  EXPECT_EQ(f32_to_f16(-2.0f), 0xC000);
  EXPECT_EQ(f32_to_f16(65504.0f), 0x7BFF);
  EXPECT_EQ(f32_to_f16(65519.0f), 0x7BFF);
  EXPECT_EQ(f32_to_f16(65520.0f), 0x7C00);  // ties to even rounds up into Inf
  EXPECT_EQ(f32_to_f16(std::numeric_limits<float>::infinity()), 0x7C00);
  EXPECT_EQ(f32_to_f16(-0.0f), 0x8000);
  EXPECT_EQ(f32_to_f16(0x1p-24f), 0x0001);  // smallest subnormal
  EXPECT_EQ(f32_to_f16(0x1p-25f), 0x0000);  // tie to even: 0
  EXPECT_EQ(f32_to_f16(0x1.8p-25f), 0x0001);
  EXPECT_TRUE(std::isnan(f16_to_f32(f32_to_f16(std::nanf("")))));
  // Every f16 value survives f16 -> f32 -> f16.
  for (std::uint32_t h = 0; h < 0x10000; ++h) {
    const float f = f16_to_f32(static_cast<std::uint16_t>(h));
    if (std::isnan(f)) continue;
    EXPECT_EQ(f32_to_f16(f), h);
  }
}

TEST(Half, Bf16ConversionRoundsToNearestEvenAndKeepsNaN) {
  using namespace gradcodec::blocks;
  EXPECT_EQ(f32_to_bf16(1.0f), 0x3F80);
  EXPECT_EQ(f32_to_bf16(gradcodec::blocks::bits_float(0x3F808000u)), 0x3F80);  // tie, even stays
  EXPECT_EQ(f32_to_bf16(gradcodec::blocks::bits_float(0x3F818000u)), 0x3F82);  // tie, odd rounds up
  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(gradcodec::blocks::bits_float(0x7F800001u)))));
  EXPECT_TRUE(std::isinf(bf16_to_f32(f32_to_bf16(std::numeric_limits<float>::max()))));
}

// The stack form of the canonical sum equals the literal level-by-level definition.
TEST(CanonicalSum, StackFormEqualsLevelByLevelDefinition) {
  std::vector<float> v(256 * 37 + 11);
  std::uint32_t state = 12345;
  for (auto& x : v) {
    state = state * 1664525u + 1013904223u;
    x = static_cast<float>(static_cast<std::int32_t>(state)) * 1e-7f;
  }
  for (std::size_t len :
       {std::size_t{0}, std::size_t{1}, std::size_t{255}, std::size_t{256}, std::size_t{257},
        std::size_t{256 * 3}, std::size_t{256 * 5 + 1}, std::size_t{256 * 7}, v.size()}) {
    std::vector<float> chunks;
    for (std::size_t c0 = 0; c0 < len; c0 += 256) {
      float lane[16] = {};
      for (std::size_t t = 0; t < 256 && c0 + t < len; ++t) lane[t % 16] = lane[t % 16] + v[c0 + t];
      for (int h = 8; h >= 1; h /= 2)
        for (int j = 0; j < h; ++j) lane[j] = lane[j] + lane[j + h];
      chunks.push_back(lane[0]);
    }
    while (chunks.size() > 1) {
      std::vector<float> next;
      for (std::size_t j = 0; j + 1 < chunks.size(); j += 2)
        next.push_back(chunks[j] + chunks[j + 1]);
      if (chunks.size() % 2) next.push_back(chunks.back());
      chunks = next;
    }
    const float want = chunks.empty() ? 0.0f : chunks[0];
    const float got =
        gradcodec::reference::canonical_sum(len, [&](std::uint64_t i) { return v[i]; });
    EXPECT_EQ(std::memcmp(&want, &got, 4), 0) << "len " << len;
  }
}

TEST(Codec, CastRoundTripAndHeader) {
  std::vector<float> x = {1.0f, -2.5f, 3.14159f, 0.0f, -0.0f, 1e-8f, 70000.0f};
  for (auto id : {gc::codec_id::fp16, gc::codec_id::bf16}) {
    const auto spec = gc::make_spec(id);
    std::vector<std::byte> out(gc::encode_bound(spec, x.size()));
    auto n = gc::encode(spec, {}, gc::view(x), out);
    ASSERT_TRUE(n.ok()) << n.error().message();
    EXPECT_EQ(n.value(), out.size());
    std::vector<float> y(x.size());
    ASSERT_TRUE(gc::decode(gc::const_bytes(out.data(), n.value()), gc::view(y)).ok());
    for (std::size_t i = 0; i < x.size(); ++i) {
      const float want = id == gc::codec_id::fp16
                             ? gradcodec::blocks::f16_to_f32(gradcodec::blocks::f32_to_f16(x[i]))
                             : gradcodec::blocks::bf16_to_f32(gradcodec::blocks::f32_to_bf16(x[i]));
      EXPECT_EQ(std::memcmp(&want, &y[i], 4), 0) << i;
    }
  }
}

// A tensor whose data is not aligned to its element size is refused before anything is read
// or written (a GPU would fault on it): input, output and residual, every dtype.
TEST(Codec, RejectsTensorsNotAlignedToTheirElementSize) {
  const auto spec = gc::make_spec(gc::codec_id::fp16);
  alignas(8) std::array<std::byte, 64> in{}, out{}, res{};
  std::vector<std::byte> frame(gc::encode_bound(spec, 8));
  const gc::const_tensor_view good{in.data(), 8, gc::dtype::f32};
  auto n = gc::encode(spec, {}, good, frame);
  ASSERT_TRUE(n.ok()) << n.error().message();
  for (auto t : {gc::dtype::f32, gc::dtype::f16, gc::dtype::bf16})
    for (std::size_t off = 1; off < gc::dtype_size(t); ++off) {
      SCOPED_TRACE(std::string(gc::dtype_name(t)) + " +" + std::to_string(off));
      const gc::const_tensor_view bad_in{in.data() + off, 8, t};
      auto e = gc::encode(spec, {}, bad_in, frame);
      ASSERT_FALSE(e.ok());
      EXPECT_EQ(e.error().code(), gc::status_code::invalid_argument);
      EXPECT_NE(std::string(e.error().message()).find("aligned"), std::string::npos)
          << e.error().message();

      const gc::tensor_view bad_out{out.data() + off, 8, t};
      const auto d = gc::decode(gc::const_bytes(frame.data(), n.value()), bad_out);
      EXPECT_EQ(d.code(), gc::status_code::invalid_argument);
      for (auto b : out) ASSERT_EQ(b, std::byte{0});

      const gc::tensor_view bad_res{res.data() + off, 8, t};
      auto f = gc::encode_with_feedback(spec, {}, good, bad_res, frame);
      ASSERT_FALSE(f.ok());
      EXPECT_EQ(f.error().code(), gc::status_code::invalid_argument);
      for (auto b : res) ASSERT_EQ(b, std::byte{0});
    }
}
