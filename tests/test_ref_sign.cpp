// SPDX-License-Identifier: Apache-2.0
// Reference sign codecs (sign, onebit) and the signSGD majority vote, through the public
// API on the reference backend: exact bits and scales, scaled reductions at the extremes,
// non-finite buckets, sizes, decode-accumulate, half dtypes, error feedback, the vote.
#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "contract/vote_kernels.hpp"
#include "gradcodec/blocks/float16.hpp"
#include "gradcodec/blocks/layout.hpp"
#include "gradcodec/gradcodec.hpp"

namespace gc = gradcodec;
using gradcodec::blocks::bf16_to_f32;
using gradcodec::blocks::f16_to_f32;
using gradcodec::blocks::f32_to_bf16;
using gradcodec::blocks::f32_to_f16;

namespace {

const gc::exec_options ref{gc::backend::reference};
constexpr std::uint32_t nan_bits = 0x7FC00000u;

std::uint32_t bits_of(float x) {
  std::uint32_t u;
  std::memcpy(&u, &x, 4);
  return u;
}

gc::codec_spec sign_spec(gc::scale_kind kind, std::uint32_t bucket) {
  auto s = gc::make_spec(gc::codec_id::sign);
  s.scale = kind;
  s.bucket = bucket;
  return s;
}
gc::codec_spec onebit_spec(std::uint32_t bucket) {
  auto s = gc::make_spec(gc::codec_id::onebit);
  s.bucket = bucket;
  return s;
}

std::vector<std::byte> encode(const gc::codec_spec& spec, gc::const_tensor_view in) {
  std::vector<std::byte> out(gc::encode_bound(spec, in.n, in.type));
  auto r = gc::encode(spec, {}, in, out, ref);
  EXPECT_TRUE(r.ok()) << r.error().message();
  out.resize(r.ok() ? r.value() : 0);
  return out;
}
std::vector<std::byte> encode(const gc::codec_spec& spec, const std::vector<float>& x) {
  return encode(spec, gc::view(x));
}

std::vector<float> decode(const std::vector<std::byte>& frame, std::uint64_t n) {
  std::vector<float> y(n, 12345.0f);
  auto st = gc::decode(frame, gc::view(y), ref);
  EXPECT_TRUE(st.ok()) << st.message();
  return y;
}

gc::frame_header header(const std::vector<std::byte>& frame) {
  auto h = gc::peek(frame);
  EXPECT_TRUE(h.ok()) << h.error().message();
  return h.value();
}

// Scale k of bucket b (scales per bucket: 1 for sign, 2 for onebit).
float scale(const std::vector<std::byte>& frame, std::uint32_t per_bucket, std::uint64_t b,
            std::uint32_t k = 0) {
  float s;
  std::memcpy(&s, frame.data() + gc::header_bytes + (b * per_bucket + k) * 4, 4);
  return s;
}

// Sign bit of element i.
int bit(const std::vector<std::byte>& frame, std::uint64_t n, std::uint64_t bucket,
        std::uint32_t per_bucket, std::uint64_t i) {
  const auto l = gc::blocks::bucket_layout_of(n, bucket, per_bucket, 1);
  const auto byte = static_cast<std::uint8_t>(frame[gc::header_bytes + l.codes_offset + i / 8]);
  return (byte >> (i % 8)) & 1;
}

void expect_same_bits(float want, float got, const char* what, std::uint64_t i) {
  EXPECT_EQ(bits_of(want), bits_of(got))
      << what << " [" << i << "]: want " << want << " got " << got;
}

// Units in the last place of `want` (as a float) between got and the double `want`.
double ulps(float got, double want) {
  const float w = static_cast<float>(want);
  const double ulp = static_cast<double>(std::nextafter(std::fabs(w), INFINITY)) - std::fabs(w);
  return std::fabs(static_cast<double>(got) - want) / ulp;
}

// Gaussian values (mixed signs) of standard deviation `magnitude`, fixed by the seed.
std::vector<float> random_values(std::size_t n, std::uint32_t seed, float magnitude = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(n);
  for (auto& v : x) v = normal(rng) * magnitude;
  return x;
}

}  // namespace

TEST(Sign, HandWrittenBitsScalesAndBytes) {
  // Buckets of 4: {1, -2, +0, -0}, all negative, tail {7}.
  const std::vector<float> x = {1.0f, -2.0f, 0.0f, -0.0f, -3.0f, -4.0f, -5.0f, -6.0f, 7.0f};
  const int want_bits[] = {0, 1, 0, 0, 1, 1, 1, 1, 0};
  struct expected {
    gc::scale_kind kind;
    float scales[3];
  };
  for (const auto& e : {expected{gc::scale_kind::none, {1.0f, 1.0f, 1.0f}},
                        expected{gc::scale_kind::mean, {0.75f, 4.5f, 7.0f}},
                        expected{gc::scale_kind::l2, {std::sqrt(1.25f), std::sqrt(21.5f), 7.0f}}}) {
    const auto frame = encode(sign_spec(e.kind, 4), x);
    const auto h = header(frame);
    EXPECT_EQ(h.codec, gc::codec_id::sign);
    EXPECT_EQ(h.group, 4u);
    EXPECT_EQ(h.mode, static_cast<unsigned>(e.kind) << gc::mode_scale_shift);
    EXPECT_EQ(h.flags, 0u);
    ASSERT_EQ(frame.size(), gc::header_bytes + 32);  // 3 scales, pad to 16, 2 code bytes, pad
    for (std::uint64_t b = 0; b < 3; ++b)
      expect_same_bits(e.scales[b], scale(frame, 1, b), "scale", b);
    for (std::uint64_t i = 0; i < x.size(); ++i)
      EXPECT_EQ(bit(frame, x.size(), 4, 1, i), want_bits[i]) << i;
    // Exact payload bytes: padding zero, bits LSB-first (0xF2 = elements 1, 4, 5, 6, 7).
    EXPECT_EQ(static_cast<int>(frame[gc::header_bytes + 16]), 0xF2);
    for (std::size_t j = gc::header_bytes + 12; j < frame.size(); ++j)
      if (j != gc::header_bytes + 16) {
        EXPECT_EQ(static_cast<int>(frame[j]), 0) << "byte " << j;
      }
    const auto y = decode(frame, x.size());
    for (std::uint64_t i = 0; i < x.size(); ++i) {
      const float s = e.scales[i / 4];
      expect_same_bits(want_bits[i] ? -s : s, y[i], "decoded", i);
    }
  }
}

TEST(Sign, DefaultSpecAndZeroBucket) {
  const auto spec = gc::make_spec(gc::codec_id::sign);
  EXPECT_EQ(spec.bucket, 128u);  // chosen by the convergence suite (docs/codecs.md)
  EXPECT_EQ(spec.scale, gc::scale_kind::l2);
  // An all-zero bucket: scale +0 for mean and l2, every element decodes to +0.0.
  const std::vector<float> x = {0.0f, -0.0f, 0.0f};
  for (auto kind : {gc::scale_kind::mean, gc::scale_kind::l2}) {
    const auto frame = encode(sign_spec(kind, 2048), x);
    EXPECT_EQ(header(frame).group, 2048u);
    expect_same_bits(0.0f, scale(frame, 1, 0), "scale", 0);
    const auto y = decode(frame, x.size());
    for (std::uint64_t i = 0; i < x.size(); ++i) expect_same_bits(0.0f, y[i], "decoded", i);
  }
}

TEST(Onebit, HandWrittenMeansAndBits) {
  // Buckets of 4: mixed with +0/-0, all negative, all positive, all -0.0, tail {7}.
  const std::vector<float> x = {1.0f, -2.0f, 0.0f, -0.0f, -3.0f, -4.0f, -5.0f, -6.0f, 2.0f,
                                4.0f, 6.0f,  8.0f, -0.0f, -0.0f, -0.0f, -0.0f, 7.0f};
  const int want_bits[] = {0, 1, 0, 0, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0};
  // {mean_neg, mean_pos}; an empty group stores +0.0.
  const float want[5][2] = {
      {-2.0f, 1.0f / 3.0f}, {-4.5f, 0.0f}, {0.0f, 5.0f}, {0.0f, 0.0f}, {0.0f, 7.0f}};
  const auto frame = encode(onebit_spec(4), x);
  const auto h = header(frame);
  EXPECT_EQ(h.codec, gc::codec_id::onebit);
  EXPECT_EQ(h.group, 4u);
  EXPECT_EQ(h.mode, 0u);
  EXPECT_EQ(h.flags, 0u);
  EXPECT_EQ(h.payload_bytes, 48u + 16u);  // 5 buckets x 2 scales, then 3 code bytes
  for (std::uint64_t b = 0; b < 5; ++b) {
    expect_same_bits(want[b][0], scale(frame, 2, b, 0), "mean_neg", b);
    expect_same_bits(want[b][1], scale(frame, 2, b, 1), "mean_pos", b);
  }
  for (std::uint64_t i = 0; i < x.size(); ++i)
    EXPECT_EQ(bit(frame, x.size(), 4, 2, i), want_bits[i]) << i;
  const auto y = decode(frame, x.size());
  for (std::uint64_t i = 0; i < x.size(); ++i)
    expect_same_bits(want_bits[i] ? want[i / 4][0] : want[i / 4][1], y[i], "decoded", i);
  EXPECT_EQ(gc::make_spec(gc::codec_id::onebit).bucket, 128u);
}

TEST(SignCodecs, EmptyAndSingleElement) {
  for (const auto& spec : {sign_spec(gc::scale_kind::mean, 2048), onebit_spec(2048)}) {
    const std::vector<float> none;
    const auto empty = encode(spec, none);
    ASSERT_EQ(empty.size(), gc::header_bytes);
    EXPECT_EQ(header(empty).n, 0u);
    EXPECT_EQ(header(empty).group, 2048u);
    std::vector<float> y;
    EXPECT_TRUE(gc::decode(empty, gc::view(y), ref).ok());

    const std::vector<float> one = {-0.5f};
    const auto frame = encode(spec, one);
    EXPECT_EQ(frame.size(), gc::header_bytes + 32);
    EXPECT_EQ(bit(frame, 1, 2048, spec.id == gc::codec_id::sign ? 1 : 2, 0), 1);
    if (spec.id == gc::codec_id::sign) {
      expect_same_bits(0.5f, scale(frame, 1, 0), "scale", 0);
    } else {
      expect_same_bits(-0.5f, scale(frame, 2, 0, 0), "mean_neg", 0);
      expect_same_bits(0.0f, scale(frame, 2, 0, 1), "mean_pos", 0);
    }
    expect_same_bits(-0.5f, decode(frame, 1)[0], "decoded", 0);
  }
}

// Scales against a double-precision computation: within a few ulps over many magnitudes.
TEST(SignCodecs, ScalesMatchDoublePrecision) {
  const std::uint32_t bucket = 2048;
  const std::size_t n = 5 * bucket + 777;
  double worst[3] = {0, 0, 0};
  for (float magnitude : {1.0f, 1e-30f, 1e30f, 3e-40f, 1e-20f}) {
    const auto x = random_values(n, 42, magnitude);
    const auto mean = encode(sign_spec(gc::scale_kind::mean, bucket), x);
    const auto l2 = encode(sign_spec(gc::scale_kind::l2, bucket), x);
    const auto onebit = encode(onebit_spec(bucket), x);
    for (std::uint64_t b = 0; b * bucket < n; ++b) {
      double abs_sum = 0, sq_sum = 0, neg = 0, pos = 0;
      std::uint64_t count_neg = 0;
      const std::uint64_t end = std::min<std::uint64_t>(n, (b + 1) * bucket);
      for (std::uint64_t i = b * bucket; i < end; ++i) {
        const double v = x[i];
        abs_sum += std::fabs(v);
        sq_sum += v * v;
        (x[i] < 0 ? neg : pos) += v;
        count_neg += x[i] < 0;
      }
      const auto len = static_cast<double>(end - b * bucket);
      if (magnitude < 1e-37f) continue;  // subnormal scales: see the subnormal test
      const double e[3] = {
          ulps(scale(mean, 1, b), abs_sum / len), ulps(scale(l2, 1, b), std::sqrt(sq_sum / len)),
          std::max(ulps(scale(onebit, 2, b, 0), neg / static_cast<double>(count_neg)),
                   ulps(scale(onebit, 2, b, 1), pos / (len - static_cast<double>(count_neg))))};
      for (int k = 0; k < 3; ++k) worst[k] = std::max(worst[k], e[k]);
    }
  }
  EXPECT_LE(worst[0], 4.0) << "mean";
  EXPECT_LE(worst[1], 4.0) << "l2";
  EXPECT_LE(worst[2], 4.0) << "onebit means";
}

// The power-of-two pre-scale keeps sums of +-FLT_MAX (and their squares) finite, exactly.
TEST(SignCodecs, ExtremeMagnitudesStayFiniteAndExact) {
  const std::vector<float> x = {FLT_MAX, -FLT_MAX, FLT_MAX, 1.0f};
  // Bucket 0 = {FLT_MAX, -FLT_MAX}, bucket 1 = {FLT_MAX, 1}.
  const auto mean = encode(sign_spec(gc::scale_kind::mean, 2), x);
  expect_same_bits(FLT_MAX, scale(mean, 1, 0), "mean", 0);
  expect_same_bits(FLT_MAX / 2, scale(mean, 1, 1), "mean",
                   1);  // the 1 vanishes below FLT_MAX's ulp
  const auto l2 = encode(sign_spec(gc::scale_kind::l2, 2), x);
  expect_same_bits(FLT_MAX, scale(l2, 1, 0), "l2", 0);
  const auto onebit = encode(onebit_spec(2), x);
  expect_same_bits(-FLT_MAX, scale(onebit, 2, 0, 0), "mean_neg", 0);
  expect_same_bits(FLT_MAX, scale(onebit, 2, 0, 1), "mean_pos", 0);
  EXPECT_EQ(header(mean).flags, 0u);
  // Whole buckets of +-FLT_MAX, every length up to 2048 (the largest terms a sum can see):
  // finite, and within a few ulps of FLT_MAX (f32 rounding of the sums).
  std::vector<float> big;
  const auto near_max = [](float s) {
    return std::isfinite(s) && bits_of(std::fabs(s)) <= bits_of(FLT_MAX) &&
           bits_of(std::fabs(s)) + 4 >= bits_of(FLT_MAX);
  };
  for (std::uint32_t len = 1; len <= 2048; ++len) {
    big.assign(len, FLT_MAX);
    for (std::uint32_t i = 0; i < len; i += 3) big[i] = -FLT_MAX;
    for (auto kind : {gc::scale_kind::mean, gc::scale_kind::l2}) {
      const float s = scale(encode(sign_spec(kind, len), big), 1, 0);
      ASSERT_TRUE(near_max(s)) << "len " << len << " kind " << static_cast<int>(kind) << ": " << s;
    }
    const auto f = encode(onebit_spec(len), big);
    ASSERT_TRUE(near_max(scale(f, 2, 0, 0))) << "len " << len;
    ASSERT_TRUE(len == 1 || near_max(scale(f, 2, 0, 1))) << "len " << len;
  }
}

// Subnormal buckets are scaled up before squaring, so l2 does not underflow to 0.
TEST(SignCodecs, SubnormalsKeepTheirScale) {
  const float d = std::numeric_limits<float>::denorm_min();
  const std::vector<float> x = {d, -3 * d, 4 * d, -8 * d};
  expect_same_bits(4 * d, scale(encode(sign_spec(gc::scale_kind::mean, 4), x), 1, 0), "mean", 0);
  // sqrt((1 + 9 + 16 + 64) / 4) = 4.74 denorm_min, rounded to the subnormal grid: 5.
  expect_same_bits(5 * d, scale(encode(sign_spec(gc::scale_kind::l2, 4), x), 1, 0), "l2", 0);
  const auto onebit = encode(onebit_spec(4), x);
  // Means -5.5 and 2.5 denorm_min land on ties of the subnormal grid: to even, -6 and 2.
  expect_same_bits(-6 * d, scale(onebit, 2, 0, 0), "mean_neg", 0);
  expect_same_bits(2 * d, scale(onebit, 2, 0, 1), "mean_pos", 0);
}

// A NaN or Inf poisons exactly its bucket: canonical NaN scales, bits 0, NaN decode.
TEST(SignCodecs, NonFiniteBucketDecodesNaN) {
  const std::uint32_t bucket = 16;
  const std::size_t n = 3 * bucket + 5;
  const auto clean = random_values(n, 7);
  const float bad_values[] = {NAN, INFINITY, -INFINITY};
  const std::size_t positions[] = {0, bucket - 1, bucket, 2 * bucket - 1, 3 * bucket, n - 1};
  for (const auto& spec :
       {sign_spec(gc::scale_kind::none, bucket), sign_spec(gc::scale_kind::mean, bucket),
        sign_spec(gc::scale_kind::l2, bucket), onebit_spec(bucket)}) {
    const std::uint32_t per = spec.id == gc::codec_id::sign ? 1 : 2;
    const auto clean_frame = encode(spec, clean);
    EXPECT_EQ(header(clean_frame).flags & gc::flag_nonfinite, 0u);
    const auto clean_out = decode(clean_frame, n);
    int which = 0;
    for (std::size_t pos : positions) {
      auto x = clean;
      x[pos] = bad_values[which++ % 3];
      const auto frame = encode(spec, x);
      EXPECT_EQ(header(frame).flags & gc::flag_nonfinite, gc::flag_nonfinite);
      const std::uint64_t hit = pos / bucket;
      for (std::uint32_t k = 0; k < per; ++k)
        EXPECT_EQ(bits_of(scale(frame, per, hit, k)), nan_bits);
      const auto y = decode(frame, n);
      for (std::uint64_t i = 0; i < n; ++i) {
        if (i / bucket == hit) {
          EXPECT_EQ(bit(frame, n, bucket, per, i), 0) << i;
          EXPECT_EQ(bits_of(y[i]), nan_bits) << "pos " << pos << " i " << i;
        } else {
          expect_same_bits(clean_out[i], y[i], "unaffected", i);
        }
      }
    }
  }
}

// A crafted sign frame with bits set in a NaN bucket still decodes to the stored NaN.
TEST(Sign, NaNScaleDecodesAsItselfWhateverTheBits) {
  std::vector<float> x(8, 1.0f);
  x[3] = NAN;
  auto frame = encode(sign_spec(gc::scale_kind::mean, 8), x);
  frame[gc::header_bytes + 16] = std::byte{0xFF};  // the payload is not checksummed
  for (float v : decode(frame, 8)) EXPECT_EQ(bits_of(v), nan_bits);
}

TEST(SignCodecs, SizeMatchesFormulaAndIsDeterministic) {
  for (std::uint64_t n :
       {0ull, 1ull, 7ull, 8ull, 127ull, 128ull, 129ull, 2048ull, 4095ull, 10000ull}) {
    for (std::uint32_t bucket : {1u, 3u, 128u, 2048u}) {
      const auto x = random_values(n, static_cast<std::uint32_t>(n + bucket));
      for (const auto& spec : {sign_spec(gc::scale_kind::l2, bucket), onebit_spec(bucket)}) {
        const std::uint64_t per = spec.id == gc::codec_id::sign ? 1 : 2;
        const std::uint64_t buckets = (n + bucket - 1) / bucket;
        const std::uint64_t want =
            48 + (buckets * per * 4 + 15) / 16 * 16 + ((n + 7) / 8 + 15) / 16 * 16;
        const auto a = encode(spec, x);
        EXPECT_EQ(a.size(), want) << "n " << n << " bucket " << bucket;
        EXPECT_EQ(gc::encode_bound(spec, n), want);
        std::vector<std::byte> b(a.size());
        auto r = gc::encode(spec, gc::context{99, 5, 3}, gc::view(x), b, ref);
        ASSERT_TRUE(r.ok());
        EXPECT_EQ(a, b) << "n " << n;
      }
    }
  }
}

TEST(SignCodecs, DecodeAccumulateIsFmaAndHalfOutputsRound) {
  const std::size_t n = 3000;
  const auto x = random_values(n, 11);
  const auto acc0 = random_values(n, 12, 3.0f);
  const float alpha = 0.37f;
  for (const auto& spec : {sign_spec(gc::scale_kind::mean, 512), onebit_spec(700)}) {
    const auto frame = encode(spec, x);
    const auto d = decode(frame, n);
    auto acc = acc0;
    ASSERT_TRUE(gc::decode_accumulate(frame, gc::view(acc), alpha, ref).ok());
    for (std::size_t i = 0; i < n; ++i)
      expect_same_bits(std::fma(alpha, d[i], acc0[i]), acc[i], "acc", i);
    for (auto type : {gc::dtype::f16, gc::dtype::bf16}) {
      const auto narrow = [&](float v) {
        return type == gc::dtype::f16 ? f32_to_f16(v) : f32_to_bf16(v);
      };
      const auto widen = [&](std::uint16_t h) {
        return type == gc::dtype::f16 ? f16_to_f32(h) : bf16_to_f32(h);
      };
      std::vector<std::uint16_t> out(n), hacc(n);
      ASSERT_TRUE(gc::decode(frame, gc::tensor_view{out.data(), n, type}, ref).ok());
      for (std::size_t i = 0; i < n; ++i) hacc[i] = narrow(acc0[i]);
      const auto hacc0 = hacc;
      ASSERT_TRUE(
          gc::decode_accumulate(frame, gc::tensor_view{hacc.data(), n, type}, alpha, ref).ok());
      for (std::size_t i = 0; i < n; ++i) {
        EXPECT_EQ(out[i], narrow(d[i])) << i;
        EXPECT_EQ(hacc[i], narrow(std::fma(alpha, d[i], widen(hacc0[i])))) << i;
      }
    }
  }
}

// f16/bf16 inputs encode exactly like their f32 widening; only the header's dtype differs.
TEST(SignCodecs, HalfInputsEncodeTheirWidenedValues) {
  const std::size_t n = 2500;
  auto x = random_values(n, 13);
  x[5] = -0.0f;
  for (auto type : {gc::dtype::f16, gc::dtype::bf16}) {
    std::vector<std::uint16_t> h(n);
    std::vector<float> wide(n);
    for (std::size_t i = 0; i < n; ++i) {
      h[i] = type == gc::dtype::f16 ? f32_to_f16(x[i]) : f32_to_bf16(x[i]);
      wide[i] = type == gc::dtype::f16 ? f16_to_f32(h[i]) : bf16_to_f32(h[i]);
    }
    for (const auto& spec : {sign_spec(gc::scale_kind::l2, 1000), onebit_spec(1000)}) {
      const auto a = encode(spec, gc::const_tensor_view{h.data(), n, type});
      const auto b = encode(spec, wide);
      ASSERT_EQ(a.size(), b.size());
      EXPECT_EQ(header(a).type, type);
      EXPECT_TRUE(std::equal(a.begin() + gc::header_bytes, a.end(), b.begin() + gc::header_bytes));
    }
  }
}

// Error feedback: residual' == (grad + residual) - decode(frame), exactly.
TEST(SignCodecs, ErrorFeedbackIdentity) {
  const std::size_t n = 1500;
  const auto g = random_values(n, 21);
  const auto e0 = random_values(n, 22, 0.1f);
  for (const auto& spec :
       {sign_spec(gc::scale_kind::none, 256), sign_spec(gc::scale_kind::mean, 256),
        sign_spec(gc::scale_kind::l2, 256), onebit_spec(256)}) {
    auto e = e0;
    std::vector<std::byte> out(gc::encode_bound(spec, n));
    std::vector<std::byte> ws(
        gc::workspace_size(spec, gc::view(g), gc::operation::encode_with_feedback, ref).value());
    gc::exec_options opt = ref;
    opt.workspace = ws;
    auto r = gc::encode_with_feedback(spec, {}, gc::view(g), gc::view(e), out, opt);
    ASSERT_TRUE(r.ok()) << r.error().message();
    out.resize(r.value());
    std::vector<float> p(n);
    for (std::size_t i = 0; i < n; ++i) p[i] = g[i] + e0[i];
    EXPECT_EQ(out, encode(spec, p));
    const auto d = decode(out, n);
    for (std::size_t i = 0; i < n; ++i) expect_same_bits(p[i] - d[i], e[i], "residual", i);
  }
}

// EF-signSGD (scale = mean |p|): over many steps the residual stays bounded.
TEST(Sign, ErrorFeedbackResidualStaysBounded) {
  const std::size_t n = 4096;
  const auto spec = sign_spec(gc::scale_kind::mean, 512);
  std::vector<float> e(n, 0.0f);
  std::vector<std::byte> out(gc::encode_bound(spec, n));
  std::vector<std::byte> ws(
      gc::workspace_size(spec, gc::view(e), gc::operation::encode_with_feedback, ref).value());
  gc::exec_options opt = ref;
  opt.workspace = ws;
  double worst = 0;
  for (std::uint32_t step = 0; step < 300; ++step) {
    auto g = random_values(n, 1000 + step);
    for (std::size_t i = 0; i < n; ++i)
      g[i] *= 1.0f + static_cast<float>(i % 64);  // uneven coordinates
    ASSERT_TRUE(gc::encode_with_feedback(spec, {}, gc::view(g), gc::view(e), out, opt).ok());
    double norm = 0;
    for (float v : e) norm += static_cast<double>(v) * v;
    worst = std::max(worst, std::sqrt(norm / n));
  }
  // The gradients' RMS is about 37 (the residual's settles near it); a diverging residual
  // would grow without bound.
  EXPECT_LT(worst, 5.0 * 37.0);
  EXPECT_GT(worst, 0.0);
}

namespace {

std::vector<std::byte> sign_frame_of(const std::vector<int>& signs, std::uint32_t bucket) {
  std::vector<float> x(signs.size());
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = signs[i] < 0 ? -1.5f : 2.5f;
  return encode(sign_spec(gc::scale_kind::mean, bucket), x);
}

}  // namespace

TEST(Vote, CountsEveryElementAcrossWordAndBucketBoundaries) {
  // Long inputs whose buckets start at every bit offset, with 1 to 256 voters: each element's
  // result is the sign of (positive votes - negative votes), from the signs themselves.
  const std::size_t n = 3001;
  std::uint64_t state = 12345;
  auto next_sign = [&] {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return (state >> 33) % 2 == 0 ? 1 : -1;
  };
  for (std::uint32_t bucket : {37u, 64u, 100u, 3001u}) {
    for (std::size_t voters : {1u, 2u, 5u, 9u, 256u}) {  // 256: past the byte counters
      std::vector<std::vector<int>> signs(voters, std::vector<int>(n));
      std::vector<std::vector<std::byte>> f;
      for (auto& v : signs) {
        for (auto& x : v) x = next_sign();
        f.push_back(sign_frame_of(v, bucket));
      }
      const std::vector<gc::const_bytes> frames(f.begin(), f.end());
      // The public function (the CPU backend's kernel where there is one) and the scalar
      // oracle that kernel is tested against (test_cpu_vote).
      for (bool oracle : {false, true}) {
        std::vector<float> out(n, 99.0f);
        const gc::status st =
            oracle ? gc::detail::majority_vote_with(gc::detail::vote_scalar_kernels(), frames,
                                                    gc::view(out), 1.0f)
                   : gc::sign_majority_vote(frames, gc::view(out), 1.0f);
        ASSERT_TRUE(st.ok()) << st.message();
        for (std::size_t i = 0; i < n; ++i) {
          int sum = 0;
          for (const auto& v : signs) sum += v[i];
          const float want = sum > 0 ? 1.0f : sum < 0 ? -1.0f : 0.0f;
          ASSERT_EQ(out[i], want) << "bucket " << bucket << " voters " << voters << " element " << i
                                  << (oracle ? " (oracle)" : "");
        }
      }
    }
  }
}

TEST(Vote, ThreeAndFourFramesWithTiesToZero) {
  // n = 6, buckets of 4 (tail of 2).
  const std::vector<std::vector<int>> s = {{+1, -1, +1, -1, -1, +1},
                                           {+1, -1, -1, +1, -1, -1},
                                           {-1, -1, +1, +1, +1, -1},
                                           {-1, +1, -1, -1, +1, +1}};
  std::vector<std::vector<std::byte>> f;
  for (const auto& v : s) f.push_back(sign_frame_of(v, 4));
  const float alpha = 0.5f;
  {
    const std::vector<gc::const_bytes> three = {f[0], f[1], f[2]};
    std::vector<float> out(6, 99.0f);
    ASSERT_TRUE(gc::sign_majority_vote(three, gc::view(out), alpha).ok());
    const float want[] = {0.5f, -0.5f, 0.5f, 0.5f, -0.5f, -0.5f};
    for (std::size_t i = 0; i < 6; ++i) expect_same_bits(want[i], out[i], "vote3", i);
  }
  {
    const std::vector<gc::const_bytes> four = {f[0], f[1], f[2], f[3]};
    std::vector<float> out(6, 99.0f);
    ASSERT_TRUE(gc::sign_majority_vote(four, gc::view(out), alpha).ok());
    // counts: 0, -2, 0, 0, 0, 0 -> ties give +0.0
    const float want[] = {0.0f, -0.5f, 0.0f, 0.0f, 0.0f, 0.0f};
    for (std::size_t i = 0; i < 6; ++i) expect_same_bits(want[i], out[i], "vote4", i);
    std::vector<std::uint16_t> half(6);
    ASSERT_TRUE(gc::sign_majority_vote(four, gc::tensor_view{half.data(), 6, gc::dtype::f16}).ok());
    for (std::size_t i = 0; i < 6; ++i) EXPECT_EQ(half[i], f32_to_f16(want[i] * 2.0f)) << i;
  }
  {
    const std::vector<gc::const_bytes> one = {f[2]};
    std::vector<float> out(6);
    ASSERT_TRUE(gc::sign_majority_vote(one, gc::view(out)).ok());
    for (std::size_t i = 0; i < 6; ++i)
      expect_same_bits(static_cast<float>(s[2][i]), out[i], "vote1", i);
  }
}

TEST(Vote, RejectsMismatchesWithoutWriting) {
  const std::vector<int> six = {1, -1, 1, -1, 1, -1};
  const auto a = sign_frame_of(six, 4);
  const auto b = sign_frame_of(six, 4);
  const auto longer = sign_frame_of({1, -1, 1, -1, 1, -1, 1}, 4);
  const auto other_bucket = sign_frame_of(six, 8);
  const auto onebit = encode(onebit_spec(4), std::vector<float>{1, -1, 1, -1, 1, -1});
  const auto truncated = std::vector<std::byte>(a.begin(), a.end() - 1);
  auto bad_crc = a;
  bad_crc[9] ^= std::byte{1};
  struct bad_case {
    std::vector<gc::const_bytes> frames;
    std::size_t out_n;
    gc::status_code want;
  };
  const std::vector<bad_case> cases = {
      {{}, 6, gc::status_code::invalid_argument},
      {{a, b, longer}, 6, gc::status_code::shape_mismatch},
      {{a, b, other_bucket}, 6, gc::status_code::shape_mismatch},
      {{a, b, onebit}, 6, gc::status_code::corrupt_frame},
      {{a, b, truncated}, 6, gc::status_code::corrupt_frame},
      {{a, b, bad_crc}, 6, gc::status_code::corrupt_frame},
      {{a, b}, 5, gc::status_code::shape_mismatch},
  };
  for (std::size_t k = 0; k < cases.size(); ++k) {
    std::vector<std::uint32_t> out(8, 0x5A5A5A5Au);
    auto st = gc::sign_majority_vote(cases[k].frames,
                                     gc::tensor_view{out.data(), cases[k].out_n, gc::dtype::f32});
    EXPECT_EQ(st.code(), cases[k].want) << "case " << k << ": " << st.message();
    for (auto w : out) EXPECT_EQ(w, 0x5A5A5A5Au) << "case " << k;
  }
}

TEST(Vote, NaNBucketStaysNaN) {
  std::vector<float> x(10, 1.0f), y(10, -1.0f);
  y[5] = NAN;  // bucket 1 of 4
  const auto fx = encode(sign_spec(gc::scale_kind::none, 4), x);
  const auto fy = encode(sign_spec(gc::scale_kind::none, 4), y);
  const std::vector<gc::const_bytes> frames = {fx, fx, fy};
  std::vector<float> out(10);
  ASSERT_TRUE(gc::sign_majority_vote(frames, gc::view(out), 2.0f).ok());
  for (std::size_t i = 0; i < 10; ++i) {
    if (i / 4 == 1) {
      EXPECT_EQ(bits_of(out[i]), nan_bits) << i;
    } else {
      expect_same_bits(2.0f, out[i], "vote", i);
    }
  }
}

TEST(Vote, NaNProductsAreTheCanonicalNaN) {
  // A NaN alpha of either sign, or an infinite alpha at a tie, gives the canonical NaN in
  // every dtype: `alpha * -1.0f` may be folded into a sign flip, and the bits must not
  // depend on that (found by fuzz_vote).
  const auto a = sign_frame_of({1, -1, 1, -1}, 4);
  const auto b = sign_frame_of({1, -1, -1, 1}, 4);
  const std::vector<gc::const_bytes> frames = {a, b};  // votes +1, -1, tie, tie
  for (std::uint32_t alpha_bits : {0xFFFF0000u, 0x7FC00001u, 0x7F800000u, 0xFF800000u}) {
    float alpha;
    std::memcpy(&alpha, &alpha_bits, 4);
    std::vector<float> out(4);
    ASSERT_TRUE(gc::sign_majority_vote(frames, gc::view(out), alpha).ok());
    for (std::size_t i = 0; i < 4; ++i) {
      const float want = alpha * (i == 0 ? 1.0f : i == 1 ? -1.0f : 0.0f);
      if (std::isnan(want))
        EXPECT_EQ(bits_of(out[i]), nan_bits) << std::hex << alpha_bits << " element " << i;
      else
        expect_same_bits(want, out[i], "vote", i);
    }
    std::vector<std::uint16_t> half(4);
    ASSERT_TRUE(
        gc::sign_majority_vote(frames, gc::tensor_view{half.data(), 4, gc::dtype::bf16}, alpha)
            .ok());
    for (std::size_t i = 0; i < 4; ++i)
      EXPECT_EQ(half[i], gc::blocks::f32_to_bf16(out[i])) << std::hex << alpha_bits << " " << i;
  }
}

// One byte short of the exact size: output_too_small, and nothing written past the end.
TEST(SignCodecs, OneByteShortOutputWritesNothingPastTheEnd) {
  const std::size_t n = 1000;
  const auto x = random_values(n, 31);
  for (const auto& spec : {sign_spec(gc::scale_kind::mean, 128), onebit_spec(128)}) {
    const std::uint64_t need = gc::encode_bound(spec, n);
    std::vector<std::byte> buf(need + 64, std::byte{0xA5});
    auto r = gc::encode(spec, {}, gc::view(x), gc::mutable_bytes(buf.data(), need - 1), ref);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.error().code(), gc::status_code::output_too_small);
    for (std::size_t j = need - 1; j < buf.size(); ++j) EXPECT_EQ(buf[j], std::byte{0xA5}) << j;
  }
}
