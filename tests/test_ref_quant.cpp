// SPDX-License-Identifier: Apache-2.0
// The reference quantization codecs (qsgd, terngrad, minmax) through the public API:
// payload sizes and known answers, determinism, unbiasedness and QSGD's variance bound
// over many seeds, value sets and error bounds, edge values (zeros, -0.0, subnormals,
// +-FLT_MAX, NaN/Inf), decode-accumulate, half dtypes, error feedback and short buffers.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "support/data.hpp"

namespace gc = gradcodec;
using gc::test::tensor;

namespace {

constexpr gc::context kCtx{42, 3, 5};
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

gc::codec_spec spec(const std::string& text) {
  auto s = gc::parse_spec(text);
  EXPECT_TRUE(s.ok()) << text << ": " << s.error().message();
  return s.ok() ? s.value() : gc::codec_spec{};
}

std::vector<std::byte> enc(const gc::codec_spec& s, const std::vector<float>& v,
                           gc::context ctx = kCtx) {
  auto f = gc::test::encode_vec(s, ctx, gc::view(v));
  EXPECT_TRUE(f.ok()) << gc::to_string(s) << ": " << f.error().message();
  return f.ok() ? f.value() : std::vector<std::byte>{};
}

std::vector<float> dec(const std::vector<std::byte>& frame, std::uint64_t n) {
  std::vector<float> out(n, -1.0f);
  auto st = gc::test::decode_vec(frame, gc::view(out));
  EXPECT_TRUE(st.ok()) << st.message();
  return out;
}

std::uint64_t align16(std::uint64_t x) { return (x + 15) / 16 * 16; }

//! Scales per bucket and bits per code of a spec, from docs/format.md.
struct shape {
  std::uint32_t scales, bits;
};
shape shape_of(const gc::codec_spec& s) {
  switch (s.id) {
    case gc::codec_id::qsgd: return {1, static_cast<std::uint32_t>(std::bit_width(2u * s.levels))};
    case gc::codec_id::terngrad: return {1, 2};
    default: return {2, s.bits};
  }
}

//! Reads the payload of a bucketed frame independently of the library's layout code.
struct payload_reader {
  const std::vector<std::byte>& f;
  std::uint64_t n, bucket;
  shape sh;
  std::uint64_t buckets() const { return (n + bucket - 1) / bucket; }
  float scale(std::uint64_t b, std::uint32_t j) const {
    float x;
    std::memcpy(&x, f.data() + gc::header_bytes + (b * sh.scales + j) * 4, 4);
    return x;
  }
  std::uint32_t code(std::uint64_t i) const {
    const std::byte* codes = f.data() + gc::header_bytes + align16(buckets() * sh.scales * 4);
    std::uint32_t v = 0;
    for (std::uint32_t k = 0; k < sh.bits; ++k) {
      const std::uint64_t j = i * sh.bits + k;
      v |= ((static_cast<std::uint32_t>(codes[j / 8]) >> (j % 8)) & 1u) << k;
    }
    return v;
  }
};
payload_reader reader(const std::vector<std::byte>& f, const gc::codec_spec& s, std::uint64_t n) {
  return {f, n, s.bucket, shape_of(s)};
}

std::uint32_t bits_of(float x) { return std::bit_cast<std::uint32_t>(x); }

//! Gaussian data with a few exact zeros and a -0.0 mixed in.
std::vector<float> data(std::size_t n, std::uint64_t seed, float scale = 1.0f) {
  auto v = gc::test::gaussian(n, seed, scale);
  for (std::size_t i = 5; i < n; i += 97) v[i] = (i / 97) % 2 ? 0.0f : -0.0f;
  return v;
}

// ---------------------------------------------------------------------------------------
// Sizes, headers, known answers.

TEST(RefQuant, EncodedSizeIsTheFormulaAndTheHeaderDescribesTheSpec) {
  const char* const specs[] = {"qsgd:levels=1",
                               "qsgd:levels=7,norm=max",
                               "qsgd:levels=127,rounding=nearest",
                               "qsgd:levels=25",
                               "terngrad",
                               "terngrad:clip=2.5",
                               "minmax:bits=1",
                               "minmax:bits=3,rounding=stochastic",
                               "minmax:bits=4",
                               "minmax:bits=8"};
  for (const char* text : specs) {
    for (std::uint32_t bucket : {1u, 7u, 512u, 1000u}) {
      gc::codec_spec s = spec(text);
      s.bucket = bucket;
      const shape sh = shape_of(s);
      for (std::uint64_t n :
           {0ull, 1ull, 7ull, bucket - 1ull, 1ull * bucket, bucket + 1ull, 4097ull}) {
        const auto f = enc(s, data(n, n + 1));
        const std::uint64_t buckets = (n + bucket - 1) / bucket;
        const std::uint64_t payload =
            align16(align16(buckets * sh.scales * 4) + (n * sh.bits + 7) / 8);
        ASSERT_EQ(f.size(), gc::header_bytes + payload)
            << text << " bucket " << bucket << " n " << n;
        EXPECT_EQ(f.size(), gc::encode_bound(s, n));
        auto h = gc::peek(f);
        ASSERT_TRUE(h.ok()) << h.error().message();
        EXPECT_EQ(h.value().group, bucket);
        EXPECT_EQ(h.value().flags, 0);
        EXPECT_EQ(gc::spec_of(h.value()), s) << text << ": the header rebuilds the spec";
      }
    }
  }
}

TEST(RefQuant, QsgdKnownAnswer) {
  const auto s = spec("qsgd:levels=7,bucket=4,norm=max,rounding=nearest");
  const std::vector<float> v{1.0f, -0.5f, 0.25f, 0.0f, 0.5f, -0.5f, 0.0625f, -0.0f};
  const auto f = enc(s, v);
  // norms 1 and 0.5; levels r = 7|v|/norm rounded half up: (7, 3.5->4, 1.75->2, 0), (7, 7,
  // 0.875->1, 0). codes q + 7: 14, 3, 9, 7 | 14, 0, 8, 7, four bits each, LSB first.
  const std::vector<std::uint8_t> want{0x00, 0x00, 0x80, 0x3F, 0x00, 0x00, 0x00, 0x3F, 0,    0, 0,
                                       0,    0,    0,    0,    0,    0x3E, 0x79, 0x0E, 0x78, 0, 0,
                                       0,    0,    0,    0,    0,    0,    0,    0,    0,    0};
  ASSERT_EQ(f.size(), gc::header_bytes + want.size());
  for (std::size_t k = 0; k < want.size(); ++k)
    EXPECT_EQ(static_cast<std::uint8_t>(f[gc::header_bytes + k]), want[k]) << "payload byte " << k;
  const auto h = gc::peek(f).value();
  EXPECT_EQ(h.level, 7);
  EXPECT_EQ(h.mode, gc::mode_norm_max);
  const auto d = dec(f, v.size());
  const float s0 = 1.0f / 7.0f, s1 = 0.5f / 7.0f;
  const std::vector<float> want_d{7 * s0, -4 * s0, 2 * s0, 0.0f, 7 * s1, -7 * s1, 1 * s1, 0.0f};
  for (std::size_t i = 0; i < v.size(); ++i)
    EXPECT_TRUE(gc::test::same_bits(d[i], want_d[i])) << i << ": " << d[i];
}

TEST(RefQuant, TernGradKnownAnswer) {
  const auto s = spec("terngrad:bucket=8");
  // |w| = s is sent with probability 1 and 0 with probability 0, whatever the seed.
  const std::vector<float> v{2.0f, -2.0f, 0.0f, -0.0f, 2.0f, 0.0f, 0.0f, -2.0f};
  const auto f = enc(s, v);
  // codes 01, 11, 00, 00 | 01, 00, 00, 11.
  const std::vector<std::uint8_t> want{0x00, 0x00, 0x00, 0x40, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                                       0x0D, 0xC1, 0,    0,    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
  ASSERT_EQ(f.size(), gc::header_bytes + want.size());
  for (std::size_t k = 0; k < want.size(); ++k)
    EXPECT_EQ(static_cast<std::uint8_t>(f[gc::header_bytes + k]), want[k]) << "payload byte " << k;
  const auto d = dec(f, v.size());
  for (std::size_t i = 0; i < v.size(); ++i)
    EXPECT_TRUE(gc::test::same_bits(d[i], v[i] + 0.0f)) << i;
}

TEST(RefQuant, MinmaxKnownAnswer) {
  const auto s = spec("minmax:bits=2,bucket=4");
  const std::vector<float> v{-1.0f, 0.0f, 0.5f, 2.0f, 3.0f, 3.0f, 3.0f, 3.0f};
  const auto f = enc(s, v);
  // Bucket 0: lo -1, hi 2, h = 1.5, t = (v/2 + 1/2) * 2 = 0, 1, 1.5 -> 2 (half up), 3.
  // Bucket 1 is constant: lo = hi = 3, codes 0.
  const std::vector<std::uint8_t> want{0x00, 0x00, 0x80, 0xBF, 0x00, 0x00, 0x00, 0x40,
                                       0x00, 0x00, 0x40, 0x40, 0x00, 0x00, 0x40, 0x40,
                                       0xE4, 0x00, 0,    0,    0,    0,    0,    0,
                                       0,    0,    0,    0,    0,    0,    0,    0};
  ASSERT_EQ(f.size(), gc::header_bytes + want.size());
  for (std::size_t k = 0; k < want.size(); ++k)
    EXPECT_EQ(static_cast<std::uint8_t>(f[gc::header_bytes + k]), want[k]) << "payload byte " << k;
  const auto d = dec(f, v.size());
  const std::vector<float> want_d{-1.0f, 0.0f, 1.0f, 2.0f, 3.0f, 3.0f, 3.0f, 3.0f};
  for (std::size_t i = 0; i < v.size(); ++i)
    EXPECT_TRUE(gc::test::same_bits(d[i], want_d[i])) << i << ": " << d[i];
}

// ---------------------------------------------------------------------------------------
// Determinism.

TEST(RefQuant, SameContextSameBytesNearestIgnoresTheSeedStochasticDoesNot) {
  const auto v = data(1500, 3);
  for (const char* text : {"qsgd", "qsgd:norm=max", "terngrad", "terngrad:clip=2.5",
                           "minmax:rounding=stochastic", "minmax:bits=2,rounding=stochastic"}) {
    const auto s = spec(text);
    EXPECT_EQ(enc(s, v), enc(s, v)) << text;
    EXPECT_NE(enc(s, v, {42, 3, 5}), enc(s, v, {42, 4, 5}))
        << text << ": stochastic must differ across steps";
    EXPECT_NE(enc(s, v, {42, 3, 5}), enc(s, v, {43, 3, 5})) << text << ": and across seeds";
    EXPECT_NE(enc(s, v, {42, 3, 5}), enc(s, v, {42, 3, 6})) << text << ": and across tensors";
  }
  for (const char* text : {"qsgd:rounding=nearest", "qsgd:norm=max,rounding=nearest,levels=3",
                           "minmax", "minmax:bits=8"}) {
    const auto s = spec(text);
    EXPECT_EQ(enc(s, v, {1, 2, 3}), enc(s, v, {99, 77, 55}))
        << text << ": nearest rounding draws nothing";
  }
}

// ---------------------------------------------------------------------------------------
// Statistics over seeds.

constexpr int kSeeds = 1000;

//! An element's decoded distribution: levels `step` apart, the upper one with probability f;
//! `tol` allows for f32 rounding of the scales and levels.
struct two_point_dist {
  double step, f, tol;
};

//! Checks that the mean of decode over kSeeds contexts is within 5 sigma of v per element.
//! sigma is that of the mean of a two-point variable (levels `step` apart, upper one with
//! probability f): sqrt(step^2 f (1 - f) / N). A rare event's count has a heavier tail
//! than the normal one (e.g. N f = 0.1 reaches 2 counts with p = 0.5%), so 3 counts of
//! slack (3 step / N) are added; `tol` covers f32 rounding of the scales and levels.
//! `two_point(i, frame) -> {step, f, tol}` gives an element's distribution.
//! The expectation is v, or `target` when given (TernGrad with clipping: w).
template <class TwoPoint>
void expect_unbiased(const gc::codec_spec& s, const std::vector<float>& v, TwoPoint two_point,
                     const std::vector<float>* target = nullptr) {
  const std::uint64_t n = v.size();
  std::vector<double> sum(n, 0.0);
  for (int k = 0; k < kSeeds; ++k) {
    const auto d = dec(enc(s, v, {static_cast<std::uint64_t>(k) * 7919 + 1, 11, 2}), n);
    for (std::uint64_t i = 0; i < n; ++i) sum[i] += d[i];
  }
  const auto f0 = enc(s, v);
  int bad = 0;
  for (std::uint64_t i = 0; i < n && bad < 10; ++i) {
    const auto [step, f, tol] = two_point(i, f0);
    const double sigma = std::sqrt(step * step * f * (1.0 - f) / kSeeds);
    const double mean = sum[i] / kSeeds;
    const double err = std::fabs(mean - (target ? (*target)[i] : v[i]));
    if (err > 5.0 * sigma + 3.0 * step / kSeeds + tol) {
      ADD_FAILURE() << gc::to_string(s) << " element " << i << " v=" << v[i] << " mean=" << mean
                    << " sigma=" << sigma << " f=" << f;
      ++bad;
    }
  }
}

double frac(double x) { return x - std::floor(x); }

TEST(RefQuant, QsgdStochasticIsUnbiased) {
  auto v = data(1100, 21);
  v[17] = 3.5f;  // a large value: the max element of its bucket
  for (const char* text : {"qsgd", "qsgd:norm=max,levels=3", "qsgd:levels=1,bucket=300"}) {
    const auto s = spec(text);
    expect_unbiased(s, v, [&](std::uint64_t i, const std::vector<std::byte>& f) {
      const double norm = reader(f, s, v.size()).scale(i / s.bucket, 0);
      const double step = norm / s.levels;
      return two_point_dist{step, frac(std::fabs(v[i]) / step), 2e-6 * norm};
    });
  }
}

TEST(RefQuant, TernGradIsUnbiased) {
  auto v = data(1100, 22);
  v[100] = 9.0f;  // clipped when clip > 0
  for (const char* text : {"terngrad:clip=0", "terngrad:clip=2.5,bucket=300"}) {
    const auto s = spec(text);
    // Unbiased for w = v clipped to [-c, c]; s = min(max |v|, c), so w = clamp(v, -s, s).
    const auto f0 = enc(s, v);
    std::vector<float> w(v.size());
    for (std::size_t i = 0; i < v.size(); ++i) {
      const float sc = reader(f0, s, v.size()).scale(i / s.bucket, 0);
      w[i] = std::clamp(v[i], -sc, sc);
    }
    expect_unbiased(
        s, v,
        [&](std::uint64_t i, const std::vector<std::byte>& f) {
          const double sc = reader(f, s, v.size()).scale(i / s.bucket, 0);
          return two_point_dist{sc, std::fabs(w[i]) / sc, 2e-6 * sc};
        },
        &w);
  }
}

TEST(RefQuant, MinmaxStochasticIsUnbiased) {
  const auto v = data(1100, 23);
  for (const char* text :
       {"minmax:rounding=stochastic", "minmax:bits=1,bucket=200,rounding=stochastic",
        "minmax:bits=8,rounding=stochastic"}) {
    const auto s = spec(text);
    expect_unbiased(s, v, [&](std::uint64_t i, const std::vector<std::byte>& f) {
      const auto r = reader(f, s, v.size());
      const double lo = r.scale(i / s.bucket, 0), hi = r.scale(i / s.bucket, 1);
      const double step = (hi - lo) / ((1u << s.bits) - 1);
      return two_point_dist{step, frac((v[i] - lo) / step), 2e-6 * std::max(-lo, hi)};
    });
  }
}

TEST(RefQuant, TinyAndSubnormalBucketsStayUnbiased) {
  // Here s / norm (or 1 / s, or L / h) alone overflows f32: the encoders' prescaled ratio
  // must keep the rounding probabilities exact.
  std::vector<float> v(128);
  for (std::size_t i = 0; i < v.size(); ++i)
    v[i] = static_cast<float>(static_cast<int>(i % 41) - 20) * (i < 64 ? 0x1p-149f : 0x1p-140f);
  v[3] = 0x1p-146f;
  for (const char* text : {"qsgd:bucket=64,norm=max", "qsgd:bucket=64,levels=127"}) {
    const auto s = spec(text);
    expect_unbiased(s, v, [&](std::uint64_t i, const std::vector<std::byte>& f) {
      const double norm = reader(f, s, v.size()).scale(i / s.bucket, 0);
      // norm / s is subnormal here: decoding still spaces the levels exactly.
      const double step = norm / s.levels;
      return two_point_dist{step, frac(std::fabs(v[i]) / step), 0x1p-149};
    });
  }
  const auto t = spec("terngrad:bucket=64");
  expect_unbiased(t, v, [&](std::uint64_t i, const std::vector<std::byte>& f) {
    const double sc = reader(f, t, v.size()).scale(i / t.bucket, 0);
    return two_point_dist{sc, std::fabs(v[i]) / sc, 0.0};
  });
  // lo = 2^-120 (ulp 2^-143), h = 63 * 2^-144 is subnormal and 7 / h overflows.
  const auto m = spec("minmax:bits=3,bucket=64,rounding=stochastic");
  std::vector<float> w(128);
  for (std::size_t i = 0; i < w.size(); ++i)
    w[i] = 0x1p-120f + static_cast<float>((i * 5) % 64) * 0x1p-143f;
  expect_unbiased(m, w, [&](std::uint64_t i, const std::vector<std::byte>& f) {
    const auto r = reader(f, m, w.size());
    const double lo = r.scale(i / m.bucket, 0), hi = r.scale(i / m.bucket, 1);
    const double step = (hi - lo) / 7.0;
    return two_point_dist{step, frac((w[i] - lo) / step), 0x1p-148};
  });
}

//! Average over kSeeds of ||Q(v) - v||^2 per bucket against min(n/s^2, sqrt(n)/s) ||v||^2.
//! Slack: the average is a sample mean, so it may exceed its expectation (which the bound
//! caps) by a few standard errors; 5 standard errors (sample sd / sqrt(N)) are allowed, plus
//! 1e-5 relative for f32 rounding of the norm and levels. Returns the largest ratio
//! average / bound seen.
double check_variance_bound(const gc::codec_spec& s, const std::vector<float>& v) {
  const std::uint64_t n = v.size(), buckets = (n + s.bucket - 1) / s.bucket;
  std::vector<double> sum(buckets, 0.0), sum2(buckets, 0.0);
  for (int k = 0; k < kSeeds; ++k) {
    const auto d = dec(enc(s, v, {static_cast<std::uint64_t>(k) + 1000, 0, 9}), n);
    for (std::uint64_t b = 0; b < buckets; ++b) {
      double e = 0.0;
      for (std::uint64_t i = b * s.bucket; i < std::min(n, (b + 1) * s.bucket); ++i)
        e += (static_cast<double>(d[i]) - v[i]) * (static_cast<double>(d[i]) - v[i]);
      sum[b] += e;
      sum2[b] += e * e;
    }
  }
  double worst = 0.0;
  for (std::uint64_t b = 0; b < buckets; ++b) {
    const std::uint64_t len = std::min(n, (b + 1) * s.bucket) - b * s.bucket;
    double norm2 = 0.0;
    for (std::uint64_t i = b * s.bucket; i < b * s.bucket + len; ++i)
      norm2 += static_cast<double>(v[i]) * v[i];
    const double sl = s.levels;
    const double bound =
        std::min(len / (sl * sl), std::sqrt(static_cast<double>(len)) / sl) * norm2;
    const double mean = sum[b] / kSeeds;
    const double sd = std::sqrt(std::max(0.0, sum2[b] / kSeeds - mean * mean));
    EXPECT_LE(mean, bound * (1 + 1e-5) + 5.0 * sd / std::sqrt(double{kSeeds}))
        << gc::to_string(s) << " bucket " << b << " bound " << bound;
    worst = std::max(worst, mean / bound);
  }
  return worst;
}

TEST(RefQuant, QsgdVarianceBound) {
  for (const char* text :
       {"qsgd:norm=l2", "qsgd:levels=1,norm=l2", "qsgd:levels=4,norm=max",
        "qsgd:levels=127,bucket=1000,norm=l2", "qsgd:levels=2,bucket=64,norm=l2"}) {
    check_variance_bound(spec(text), data(1300, 31));
  }
  // Equal magnitudes with s = 1 make the bound nearly tight (expectation (1 - 1/sqrt(n))
  // of it): the check above has teeth.
  std::vector<float> eq(512);
  for (std::size_t i = 0; i < eq.size(); ++i) eq[i] = (i * 7 % 3 == 0) ? -0.25f : 0.25f;
  EXPECT_GT(check_variance_bound(spec("qsgd:levels=1,norm=l2"), eq), 0.9);
}

// ---------------------------------------------------------------------------------------
// Value sets and error bounds.

TEST(RefQuant, QsgdNearestErrorIsAtMostHalfALevel) {
  const auto v = data(1300, 41, 3.0f);
  for (const char* text : {"qsgd:rounding=nearest", "qsgd:rounding=nearest,norm=max,levels=25",
                           "qsgd:rounding=nearest,levels=1,bucket=64"}) {
    const auto s = spec(text);
    const auto f = enc(s, v);
    const auto d = dec(f, v.size());
    const auto r = reader(f, s, v.size());
    for (std::uint64_t i = 0; i < v.size(); ++i) {
      const double norm = r.scale(i / s.bucket, 0);
      ASSERT_LE(std::fabs(d[i]), norm) << text << " " << i;
      ASSERT_LE(std::fabs(static_cast<double>(d[i]) - v[i]), norm / (2.0 * s.levels) * (1 + 1e-5))
          << text << " " << i;
    }
  }
}

TEST(RefQuant, TernGradDecodesToMinusSZeroOrS) {
  auto v = data(1300, 42);
  v[700] = 40.0f;  // an outlier the clip cuts
  for (const char* text : {"terngrad", "terngrad:clip=2.5", "terngrad:bucket=100,clip=1"}) {
    const auto s = spec(text);
    const auto f = enc(s, v);
    EXPECT_EQ(gc::peek(f).value().param, s.clip);
    const auto d = dec(f, v.size());
    const auto r = reader(f, s, v.size());
    for (std::uint64_t b = 0; b < r.buckets(); ++b) {
      const std::uint64_t lo = b * s.bucket, hi = std::min<std::uint64_t>(v.size(), lo + s.bucket);
      double m = 0.0, mean = 0.0, var = 0.0;
      for (std::uint64_t i = lo; i < hi; ++i) m = std::max(m, std::fabs(static_cast<double>(v[i])));
      for (std::uint64_t i = lo; i < hi; ++i) mean += v[i];
      mean /= static_cast<double>(hi - lo);
      for (std::uint64_t i = lo; i < hi; ++i) var += (v[i] - mean) * (v[i] - mean);
      const double c = s.clip > 0 ? s.clip * std::sqrt(var / static_cast<double>(hi - lo)) : m;
      const float sc = r.scale(b, 0);
      EXPECT_NEAR(sc, std::min(m, c), 1e-5 * m) << text << " bucket " << b;
      for (std::uint64_t i = lo; i < hi; ++i) {
        ASSERT_TRUE(d[i] == sc || d[i] == -sc || gc::test::same_bits(d[i], 0.0f))
            << text << " " << i << ": " << d[i];
        ASSERT_NE(r.code(i), 2u);
        if (d[i] != 0.0f) {
          ASSERT_EQ(d[i] < 0, v[i] < 0) << "the sign is kept";
        }
      }
    }
    if (s.clip > 0) {
      EXPECT_LT(r.scale(700 / s.bucket, 0), 40.0f) << "the outlier was clipped";
    }
  }
}

TEST(RefQuant, MinmaxStaysInRangeAndNearestIsWithinHalfAStep) {
  const auto v = data(1300, 43, 2.0f);
  for (std::uint32_t bits = 1; bits <= 8; ++bits) {
    for (const char* mode : {"nearest", "stochastic"}) {
      const auto s = spec("minmax:bucket=300,bits=" + std::to_string(bits) + ",rounding=" + mode);
      const auto f = enc(s, v);
      const auto d = dec(f, v.size());
      const auto r = reader(f, s, v.size());
      for (std::uint64_t b = 0; b < r.buckets(); ++b) {
        const std::uint64_t first = b * s.bucket,
                            last = std::min<std::uint64_t>(v.size(), first + s.bucket);
        const float lo = *std::min_element(v.begin() + first, v.begin() + last);
        const float hi = *std::max_element(v.begin() + first, v.begin() + last);
        ASSERT_EQ(r.scale(b, 0), lo);
        ASSERT_EQ(r.scale(b, 1), hi);
        const double step = (static_cast<double>(hi) - lo) / ((1u << bits) - 1);
        for (std::uint64_t i = first; i < last; ++i) {
          ASSERT_GE(d[i], lo) << i;
          ASSERT_LE(d[i], hi) << i;
          const double err = std::fabs(static_cast<double>(d[i]) - v[i]);
          ASSERT_LE(err, (mode[0] == 'n' ? 0.5 : 1.0) * step * (1 + 1e-5))
              << s.bits << " " << mode << " " << i;
        }
        // The minimum comes back exactly with nearest rounding, the maximum to rounding.
        if (mode[0] == 'n')
          for (std::uint64_t i = first; i < last; ++i) {
            if (v[i] == lo) {
              ASSERT_EQ(d[i], v[i]) << i;
            }
            if (v[i] == hi) {
              ASSERT_NEAR(d[i], v[i], 1e-6 * std::fabs(hi)) << i;
            }
          }
      }
    }
  }
}

// ---------------------------------------------------------------------------------------
// Edge values.

TEST(RefQuant, ConstantBuckets) {
  std::vector<float> v(300);
  for (std::size_t i = 0; i < v.size(); ++i)
    v[i] = i < 100 ? 3.0f : (i < 200 ? -0.1f : 0x1.8p-140f);
  for (const char* text : {"minmax:bucket=100", "minmax:bucket=100,bits=1,rounding=stochastic"}) {
    const auto d = dec(enc(spec(text), v), v.size());
    for (std::size_t i = 0; i < v.size(); ++i)
      ASSERT_TRUE(gc::test::same_bits(d[i], v[i])) << text << " " << i;
  }
  // Every element of a constant bucket is its own max: sent with probability 1.
  {
    const auto d = dec(enc(spec("terngrad:bucket=100,clip=0"), v), v.size());
    for (std::size_t i = 0; i < v.size(); ++i) ASSERT_TRUE(gc::test::same_bits(d[i], v[i])) << i;
  }
  // With clipping a constant bucket has sigma ~ 0 and is clipped towards zero (documented).
  {
    const auto d = dec(enc(spec("terngrad:bucket=100,clip=2.5"), v), v.size());
    for (std::size_t i = 0; i < v.size(); ++i) ASSERT_LE(std::fabs(d[i]), std::fabs(v[i])) << i;
  }
  // QSGD with the max norm: the top level is norm itself (to the rounding of norm/s).
  for (const char* text :
       {"qsgd:bucket=100,norm=max,rounding=nearest", "qsgd:bucket=100,norm=max,levels=25"}) {
    const auto d = dec(enc(spec(text), v), v.size());
    for (std::size_t i = 0; i < v.size(); ++i)
      ASSERT_NEAR(d[i], v[i], 4e-7 * std::fabs(v[i])) << text << " " << i;
  }
  // With the L2 norm the norm of 100 threes is exactly 30.
  {
    const auto s = spec("qsgd:bucket=100,norm=l2");
    const auto f = enc(s, v);
    EXPECT_NEAR(reader(f, s, v.size()).scale(0, 0), 30.0f, 1e-5f);
  }
}

TEST(RefQuant, ZerosAndNegativeZeroDecodeToPositiveZero) {
  std::vector<float> v(200, -0.0f);
  for (std::size_t i = 0; i < 100; i += 2) v[i] = 0.0f;  // bucket 0: mixed zeros
  v[150] = 1.0f;                                         // bucket 1: -0.0 next to a value
  for (const char* text :
       {"qsgd:bucket=100", "qsgd:bucket=100,rounding=nearest,norm=max", "terngrad:bucket=100",
        "minmax:bucket=100", "minmax:bucket=100,rounding=stochastic,bits=8"}) {
    const auto s = spec(text);
    const auto f = enc(s, v);
    const auto r = reader(f, s, v.size());
    const auto d = dec(f, v.size());
    for (std::size_t i = 0; i < v.size(); ++i)
      if (i != 150) {
        ASSERT_EQ(bits_of(d[i]), 0u) << text << " " << i << " must be +0.0";
      }
    for (std::uint32_t j = 0; j < r.sh.scales; ++j) EXPECT_EQ(bits_of(r.scale(0, j)), 0u) << text;
    if (s.id == gc::codec_id::minmax) {
      EXPECT_EQ(bits_of(r.scale(1, 0)), 0u) << "lo of {-0.0, 1} is +0.0";
    }
    if (s.id == gc::codec_id::qsgd)
      for (std::size_t i = 0; i < v.size(); ++i)
        if (i != 150) {
          ASSERT_EQ(r.code(i), s.levels) << "the zero code";
        }
  }
}

TEST(RefQuant, SubnormalBucketsQuantizeLikeNormalOnes) {
  std::vector<float> v(256);
  for (std::size_t i = 0; i < v.size(); ++i)
    v[i] = static_cast<float>(static_cast<int>(i * 37 % 201) - 100) * 0x1p-149f;
  auto bucket_max = [&](std::uint64_t b, std::uint64_t len) {
    float m = 0.0f;
    for (std::uint64_t i = b * len; i < (b + 1) * len; ++i) m = std::max(m, std::fabs(v[i]));
    return m;
  };
  // norm / s is subnormal; decoding keeps the level spacing exact and rounds only at the end.
  for (const char* text : {"qsgd:bucket=128,rounding=nearest,norm=max",
                           "qsgd:bucket=128,rounding=nearest,levels=127"}) {
    const auto s = spec(text);
    const auto f = enc(s, v);
    const auto d = dec(f, v.size());
    const auto r = reader(f, s, v.size());
    for (std::size_t i = 0; i < v.size(); ++i) {
      const double norm = r.scale(i / s.bucket, 0);
      ASSERT_LE(std::fabs(static_cast<double>(d[i]) - v[i]), norm / (2.0 * s.levels) + 0x1p-149)
          << text << " " << i;
    }
  }
  for (const char* text : {"minmax:bucket=128,bits=8", "minmax:bucket=128,bits=3"}) {
    const auto s = spec(text);
    const auto f = enc(s, v);
    const auto d = dec(f, v.size());
    const auto r = reader(f, s, v.size());
    const double L = (1u << s.bits) - 1;
    for (std::size_t i = 0; i < v.size(); ++i) {
      const double lo = r.scale(i / s.bucket, 0), hi = r.scale(i / s.bucket, 1);
      ASSERT_GE(d[i], lo);
      ASSERT_LE(d[i], hi);
      ASSERT_LE(std::fabs(static_cast<double>(d[i]) - v[i]), (hi - lo) / (2 * L) + 0x1p-149)
          << text << " " << i;
    }
  }
  const auto d = dec(enc(spec("terngrad:bucket=128"), v), v.size());
  for (std::size_t i = 0; i < v.size(); ++i)
    ASSERT_TRUE(std::fabs(d[i]) == bucket_max(i / 128, 128) || d[i] == 0.0f) << i;
}

TEST(RefQuant, FltMaxDoesNotOverflow) {
  constexpr float big = FLT_MAX;
  std::vector<float> v(64, 0.0f);
  v[0] = big;
  v[1] = -big;
  v[2] = 1.0f;
  v[3] = big / 3;
  for (std::size_t i = 4; i < 32; ++i) v[i] = big;  // bucket 0: L2 norm far above FLT_MAX
  for (std::size_t i = 32; i < 64; ++i) v[i] = static_cast<float>(i) * 1e36f;
  v[40] = big;
  for (const char* text :
       {"qsgd:bucket=32", "qsgd:bucket=32,rounding=nearest", "qsgd:bucket=32,norm=max,levels=25",
        "qsgd:bucket=32,norm=max,levels=127,rounding=nearest", "terngrad:bucket=32",
        "terngrad:bucket=32,clip=2.5", "minmax:bucket=32,bits=5", "minmax:bucket=32,bits=7",
        "minmax:bucket=32,bits=7,rounding=stochastic", "minmax:bucket=32,bits=1"}) {
    const auto s = spec(text);
    const auto f = enc(s, v);
    EXPECT_EQ(gc::peek(f).value().flags, 0) << text;
    const auto d = dec(f, v.size());
    for (std::size_t i = 0; i < v.size(); ++i)
      ASSERT_TRUE(std::isfinite(d[i])) << text << " " << i << ": " << d[i];
    if (s.id == gc::codec_id::qsgd && s.norm == gc::norm_kind::l2) {
      EXPECT_EQ(reader(f, s, v.size()).scale(0, 0), big) << "the saturated norm";
    }
    if (s.rounding == gc::rounding_mode::nearest && s.id != gc::codec_id::terngrad) {
      EXPECT_NEAR(d[0] / big, 1.0f, 1e-6f) << text;
      EXPECT_NEAR(d[1] / big, -1.0f, 1e-6f) << text;
    }
  }
}

TEST(RefQuant, NonFiniteValuesPoisonExactlyTheirBucket) {
  constexpr std::uint64_t n = 200, bucket = 64;  // buckets 0..3, the last one 8 long
  const auto clean = data(n, 51);
  for (const char* text :
       {"qsgd:bucket=64", "qsgd:bucket=64,norm=max,rounding=nearest", "terngrad:bucket=64,clip=2",
        "minmax:bucket=64,rounding=stochastic", "minmax:bucket=64,bits=3"}) {
    const auto s = spec(text);
    const auto dclean = dec(enc(s, clean), n);
    for (float bad : {kNaN, kInf, -kInf}) {
      for (std::uint64_t pos : {0ull, 63ull, 64ull, 127ull, 192ull, 199ull}) {
        auto v = clean;
        v[pos] = bad;
        const auto f = enc(s, v);
        EXPECT_TRUE(gc::peek(f).value().flags & gc::flag_nonfinite);
        const auto r = reader(f, s, n);
        const std::uint64_t hit = pos / bucket;
        for (std::uint32_t j = 0; j < r.sh.scales; ++j)
          EXPECT_EQ(bits_of(r.scale(hit, j)), 0x7FC00000u) << text;
        const std::uint32_t zero_code = s.id == gc::codec_id::qsgd ? s.levels : 0u;
        const auto d = dec(f, n);
        for (std::uint64_t i = 0; i < n; ++i) {
          if (i / bucket == hit) {
            ASSERT_EQ(r.code(i), zero_code) << text << " " << i;
            ASSERT_TRUE(std::isnan(d[i])) << text << " pos " << pos << " i " << i;
          } else {
            ASSERT_TRUE(gc::test::same_bits(d[i], dclean[i]))
                << text << " pos " << pos << " i " << i;
          }
        }
      }
    }
  }
}

TEST(RefQuant, OutOfRangeCodesDecodeToDefinedValues) {
  // QSGD with s = 5 has 4-bit codes; 11..15 cannot come from an encoder and clamp to +s.
  const auto qs = spec("qsgd:levels=5,bucket=16,norm=max,rounding=nearest");
  std::vector<float> v(16, 0.0f);
  v[0] = 1.0f;
  auto f = enc(qs, v);
  f[gc::header_bytes + 16] = std::byte{0xFA};  // codes 10 (+s) and 15
  auto d = dec(f, v.size());
  EXPECT_EQ(d[0], d[1]);
  EXPECT_EQ(d[0], 5 * (1.0f / 5));
  // TernGrad's unused code 10 reads as 0.
  const auto ts = spec("terngrad:bucket=16");
  f = enc(ts, v);
  f[gc::header_bytes + 16] = std::byte{0x0A};  // codes 10, 10
  d = dec(f, v.size());
  EXPECT_TRUE(gc::test::same_bits(d[0], 0.0f));
  EXPECT_TRUE(gc::test::same_bits(d[1], 0.0f));
}

// ---------------------------------------------------------------------------------------
// Accumulate, dtypes, error feedback, short buffers.

const char* const kAll[] = {"qsgd", "qsgd:norm=max,rounding=nearest,levels=127",
                            "terngrad:clip=2.5", "minmax", "minmax:bits=3,rounding=stochastic"};

TEST(RefQuant, DecodeAccumulateIsFmaOfDecodeInEveryDtype) {
  const auto v = data(1100, 61);
  for (const char* text : kAll) {
    const auto f = enc(spec(text), v);
    const auto d = dec(f, v.size());
    for (auto t : {gc::dtype::f32, gc::dtype::f16, gc::dtype::bf16}) {
      const tensor acc0(gc::test::gaussian(v.size(), 62), t);
      tensor acc = acc0;
      const float alpha = -0.75f;
      ASSERT_TRUE(gc::test::decode_vec(f, acc.mview(), gc::backend::reference, true, alpha).ok());
      tensor plain = tensor::zeros(v.size(), t);
      ASSERT_TRUE(gc::test::decode_vec(f, plain.mview()).ok());
      for (std::size_t i = 0; i < v.size(); ++i) {
        tensor want(std::vector<float>{std::fma(alpha, d[i], acc0.get(i))}, t);
        ASSERT_TRUE(gc::test::same_bits(acc.get(i), want.get(0))) << text << " " << i;
        tensor rounded(std::vector<float>{d[i]}, t);
        ASSERT_TRUE(gc::test::same_bits(plain.get(i), rounded.get(0))) << text << " " << i;
      }
    }
  }
}

TEST(RefQuant, HalfInputsEncodeLikeTheirWidenedValues) {
  const auto v = data(1100, 63);
  for (const char* text : kAll) {
    const auto s = spec(text);
    for (auto t : {gc::dtype::f16, gc::dtype::bf16}) {
      const tensor x(v, t);
      std::vector<float> wide(v.size());
      for (std::size_t i = 0; i < v.size(); ++i) wide[i] = x.get(i);
      auto f = gc::test::encode_vec(s, kCtx, x.cview());
      ASSERT_TRUE(f.ok()) << f.error().message();
      const auto g = enc(s, wide);
      ASSERT_EQ(f.value().size(), g.size());
      EXPECT_EQ(gc::peek(f.value()).value().type, t);
      EXPECT_TRUE(std::equal(f.value().begin() + gc::header_bytes, f.value().end(),
                             g.begin() + gc::header_bytes))
          << text << ": payload independent of the input dtype";
    }
  }
}

TEST(RefQuant, ErrorFeedbackResidualIsPMinusDecode) {
  for (const char* text : kAll) {
    const auto s = spec(text);
    for (auto t : {gc::dtype::f32, gc::dtype::f16}) {
      const tensor g(data(1100, 64), t);
      tensor e(gc::test::gaussian(g.n, 65, 0.25f), gc::dtype::f32);
      std::vector<float> p(g.n);
      for (std::uint64_t i = 0; i < g.n; ++i) p[i] = g.get(i) + e.get(i);
      gc::exec_options opt{gc::backend::reference};
      std::vector<std::byte> ws(
          gc::workspace_size(s, g.cview(), gc::operation::encode_with_feedback, opt).value());
      opt.workspace = ws;
      std::vector<std::byte> frame(gc::encode_bound(s, g.n, g.type));
      auto n = gc::encode_with_feedback(s, kCtx, g.cview(), e.mview(), frame, opt);
      ASSERT_TRUE(n.ok()) << n.error().message();
      frame.resize(n.value());
      const auto direct = enc(s, p);
      EXPECT_TRUE(std::equal(frame.begin() + gc::header_bytes, frame.end(),
                             direct.begin() + gc::header_bytes))
          << text << ": encodes p = g + e";
      const auto d = dec(frame, g.n);
      for (std::uint64_t i = 0; i < g.n; ++i)
        ASSERT_TRUE(gc::test::same_bits(e.get(i), p[i] - d[i])) << text << " " << i;
    }
  }
}

TEST(RefQuant, OneByteShortOutputFailsWithoutWritingPastTheEnd) {
  for (const char* text : kAll) {
    const auto s = spec(text);
    for (std::uint64_t n : {1ull, 511ull, 1100ull}) {
      const auto v = data(n, 66);
      const std::size_t size = enc(s, v).size();
      gc::test::guarded out(size - 1);
      auto r = gc::encode(s, kCtx, gc::view(v), out.span(), {gc::backend::reference});
      ASSERT_FALSE(r.ok());
      EXPECT_EQ(r.error().code(), gc::status_code::output_too_small) << text;
      EXPECT_TRUE(out.guards_intact()) << text;
      gc::test::guarded exact(size);
      auto ok = gc::encode(s, kCtx, gc::view(v), exact.span(), {gc::backend::reference});
      ASSERT_TRUE(ok.ok()) << text;
      EXPECT_EQ(ok.value(), size);
      EXPECT_TRUE(exact.guards_intact()) << text;
    }
  }
}

}  // namespace
