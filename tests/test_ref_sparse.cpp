// SPDX-License-Identifier: Apache-2.0
// Reference sparsification codecs (topk, dgc, randomk, threshold) through the public API:
// exactness against sort-based oracles, frame sizes, determinism, random-k strata and
// unbiasedness, threshold capacity handling, decode-accumulate, error feedback, corrupt
// payloads and NaN/Inf visibility.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <utility>
#include <vector>

#include "gradcodec/blocks/float16.hpp"
#include "gradcodec/blocks/philox.hpp"
#include "gradcodec/gradcodec.hpp"
#include "support/data.hpp"

namespace gc = gradcodec;

namespace {

__extension__ typedef unsigned __int128 u128;

constexpr float inf = std::numeric_limits<float>::infinity();
const float qnan = std::numeric_limits<float>::quiet_NaN();

gc::exec_options ref() {
  gc::exec_options o;
  o.where = gc::backend::reference;
  return o;
}

std::uint64_t align16(std::uint64_t x) { return (x + 15) / 16 * 16; }

std::uint32_t bits(float x) {
  std::uint32_t u;
  std::memcpy(&u, &x, 4);
  return u;
}

//! Uniform values in [-1, 1) from a 64-bit LCG, fixed by the seed.
std::vector<float> uniform(std::size_t n, std::uint64_t seed) {
  std::vector<float> v(n);
  std::uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
  for (auto& x : v) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    x = static_cast<float>(static_cast<double>(s >> 11) * 0x1p-52 - 1.0);
  }
  return v;
}

//! The value x becomes after a store in dtype t and a load back.
float through(float x, gc::dtype t) {
  if (t == gc::dtype::f16) return gc::blocks::f16_to_f32(gc::blocks::f32_to_f16(x));
  if (t == gc::dtype::bf16) return gc::blocks::bf16_to_f32(gc::blocks::f32_to_bf16(x));
  return x;
}

//! A test tensor in any dtype; `exact` holds each element's exact f32 value.
struct tensor {
  gc::dtype type = gc::dtype::f32;
  std::vector<float> f32;
  std::vector<std::uint16_t> half;
  std::vector<float> exact;

  tensor(const std::vector<float>& v, gc::dtype t) : type(t) {
    for (float x : v) {
      if (t == gc::dtype::f32) {
        f32.push_back(x);
      } else {
        half.push_back(t == gc::dtype::f16 ? gc::blocks::f32_to_f16(x)
                                           : gc::blocks::f32_to_bf16(x));
      }
      exact.push_back(through(x, t));
    }
  }
  gc::tensor_view view() {
    void* p =
        type == gc::dtype::f32 ? static_cast<void*>(f32.data()) : static_cast<void*>(half.data());
    return {p, exact.size(), type, 0};
  }
};

std::vector<std::byte> encode_ok(const gc::codec_spec& spec, const gc::context& ctx,
                                 gc::const_tensor_view in) {
  auto need = gc::workspace_size(spec, in, gc::operation::encode, ref());
  EXPECT_TRUE(need.ok()) << need.error().message();
  std::vector<std::byte> ws(need.value_or(0));
  gc::exec_options o = ref();
  o.workspace = ws;
  std::vector<std::byte> out(gc::encode_bound(spec, in.n, in.type));
  auto r = gc::encode(spec, ctx, in, out, o);
  EXPECT_TRUE(r.ok()) << r.error().message();
  out.resize(r.value_or(0));
  return out;
}

gc::frame_header header_of(const std::vector<std::byte>& frame) {
  auto h = gc::peek(frame);
  EXPECT_TRUE(h.ok()) << h.error().message();
  return h.value_or(gc::frame_header{});
}

std::vector<float> decode_ok(const std::vector<std::byte>& frame) {
  std::vector<float> out(header_of(frame).n, 12345.0f);
  const auto st = gc::decode(frame, gc::view(out), ref());
  EXPECT_TRUE(st.ok()) << st.message();
  return out;
}

const std::byte* payload(const std::vector<std::byte>& frame) {
  return frame.data() + gc::header_bytes;
}

//! Bitwise equality of float vectors (NaN payloads and -0.0 included).
::testing::AssertionResult same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size())
    return ::testing::AssertionFailure() << "sizes " << a.size() << " vs " << b.size();
  for (std::size_t i = 0; i < a.size(); ++i)
    if (bits(a[i]) != bits(b[i]))
      return ::testing::AssertionFailure() << "element " << i << ": " << a[i] << " vs " << b[i];
  return ::testing::AssertionSuccess();
}

//! Oracle ranking: NaN above everything, then |v|; -0.0 equals +0.0.
std::pair<int, float> rank(float v) {
  return std::isnan(v) ? std::pair{1, 0.0f} : std::pair{0, std::fabs(v)};
}

//! The k largest by rank (stable sort: ties keep the lower index), in ascending index order.
std::vector<std::uint64_t> oracle_top(const std::vector<float>& v, std::uint64_t k,
                                      std::vector<std::uint64_t> among = {}) {
  if (among.empty()) {
    among.resize(v.size());
    std::iota(among.begin(), among.end(), 0);
  }
  std::stable_sort(among.begin(), among.end(),
                   [&](std::uint64_t a, std::uint64_t b) { return rank(v[a]) > rank(v[b]); });
  among.resize(std::min<std::uint64_t>(k, among.size()));
  std::sort(among.begin(), among.end());
  return among;
}

//! The sparse payload docs/format.md defines, written independently of the library.
std::vector<std::byte> sparse_payload(const std::vector<float>& v,
                                      const std::vector<std::uint64_t>& idx, gc::dtype wire) {
  const std::uint64_t k = idx.size(), vsize = gc::dtype_size(wire);
  const std::uint64_t index_off = align16(k * vsize);
  std::vector<std::byte> p(align16(index_off + 4 * k));
  for (std::uint64_t j = 0; j < k; ++j) {
    const float x = v[idx[j]];
    if (wire == gc::dtype::f32) {
      std::memcpy(p.data() + 4 * j, &x, 4);
    } else {
      const std::uint16_t h =
          wire == gc::dtype::f16 ? gc::blocks::f32_to_f16(x) : gc::blocks::f32_to_bf16(x);
      std::memcpy(p.data() + 2 * j, &h, 2);
    }
    const auto i32 = static_cast<std::uint32_t>(idx[j]);
    std::memcpy(p.data() + index_off + 4 * j, &i32, 4);
  }
  return p;
}

//! The dense decode of a sparse selection: wire-rounded values at idx (NaN canonical), +0.0
//! elsewhere.
std::vector<float> sparse_dense(const std::vector<float>& v, const std::vector<std::uint64_t>& idx,
                                gc::dtype wire) {
  std::vector<float> d(v.size(), 0.0f);
  for (auto i : idx) d[i] = gc::test::as_decoded(through(v[i], wire));
  return d;
}

void expect_payload(const std::vector<std::byte>& frame, const std::vector<std::byte>& want,
                    const char* what) {
  ASSERT_EQ(frame.size(), gc::header_bytes + want.size()) << what;
  EXPECT_TRUE(std::equal(want.begin(), want.end(), payload(frame))) << what;
}

gc::codec_spec spec_k(gc::codec_id id, std::uint64_t k) {
  auto s = gc::make_spec(id);
  s.k = k;
  return s;
}

//! Test data sets for the selection oracles.
std::vector<std::pair<const char*, std::vector<float>>> datasets(std::size_t n) {
  std::vector<std::pair<const char*, std::vector<float>>> d;
  d.emplace_back("uniform", uniform(n, 1));
  std::vector<float> ties(n);
  for (std::size_t i = 0; i < n; ++i) ties[i] = (i % 3 == 0) ? -0.5f : 0.5f;
  d.emplace_back("all-equal keys", ties);
  std::vector<float> zeros(n);
  for (std::size_t i = 0; i < n; ++i) zeros[i] = (i % 2 == 0) ? -0.0f : 0.0f;
  zeros[n / 3] = 0.25f;
  zeros[n / 2] = -0.125f;
  d.emplace_back("signed zeros", zeros);
  std::vector<float> few(n);
  for (std::size_t i = 0; i < n; ++i)
    few[i] = static_cast<float>(i % 4) * 0.25f * ((i & 4) ? -1.0f : 1.0f);
  d.emplace_back("few distinct keys", few);
  auto nf = uniform(n, 2);
  // Two NaNs with different payloads: equal keys, so the lower index ranks first.
  const std::uint32_t nan_payload = 0x7FC00001u;
  std::memcpy(&nf[n / 5], &nan_payload, 4);
  nf[n / 4] = inf;
  nf[n - 1] = -inf;
  nf[3] = -qnan;
  d.emplace_back("NaN and Inf", nf);
  return d;
}

// ---------------------------------------------------------------------------------------

TEST(TopK, MatchesStableSortOracle) {
  const std::size_t n = 1000;
  for (gc::dtype t : {gc::dtype::f32, gc::dtype::f16, gc::dtype::bf16}) {
    for (auto& [name, values] : datasets(n)) {
      for (std::uint64_t k : {std::uint64_t{0}, std::uint64_t{1}, std::uint64_t{2},
                              std::uint64_t{37}, std::uint64_t{n - 1}, std::uint64_t{n}}) {
        SCOPED_TRACE(::testing::Message()
                     << name << " dtype " << static_cast<int>(t) << " k " << k);
        tensor in(values, t);
        const auto spec =
            k == 0 ? gc::make_spec(gc::codec_id::topk) : spec_k(gc::codec_id::topk, k);
        const std::uint64_t kk = k == 0 ? 70 : k;  // default ratio 0.07 of 1000
        const auto frame = encode_ok(spec, {}, in.view());
        const auto h = header_of(frame);
        EXPECT_EQ(h.codec, gc::codec_id::topk);
        EXPECT_EQ(h.type, t);
        EXPECT_EQ(h.count, kk);
        const bool any_nf = std::any_of(in.exact.begin(), in.exact.end(),
                                        [](float x) { return !std::isfinite(x); });
        EXPECT_EQ((h.flags & gc::flag_nonfinite) != 0, any_nf);
        const auto idx = oracle_top(in.exact, kk);
        expect_payload(frame, sparse_payload(in.exact, idx, t), name);
        EXPECT_TRUE(same_bits(decode_ok(frame), sparse_dense(in.exact, idx, t)));
      }
    }
  }
}

TEST(TopK, SmallAndEmptyTensors) {
  for (std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{2}, std::size_t{17}}) {
    auto v = uniform(n, 7);
    tensor in(v, gc::dtype::f32);
    const auto frame = encode_ok(gc::make_spec(gc::codec_id::topk), {}, in.view());
    const std::uint64_t k = n == 0 ? 0 : 1;
    EXPECT_EQ(header_of(frame).count, k);
    expect_payload(frame, sparse_payload(in.exact, oracle_top(in.exact, k), gc::dtype::f32),
                   "small");
    EXPECT_TRUE(same_bits(decode_ok(frame),
                          sparse_dense(in.exact, oracle_top(in.exact, k), gc::dtype::f32)));
  }
}

TEST(TopK, DecodesIntoHalfOutputs) {
  tensor in(uniform(300, 3), gc::dtype::f32);
  const auto frame = encode_ok(spec_k(gc::codec_id::topk, 20), {}, in.view());
  const auto want = sparse_dense(in.exact, oracle_top(in.exact, 20), gc::dtype::f32);
  for (gc::dtype t : {gc::dtype::f16, gc::dtype::bf16}) {
    std::vector<std::uint16_t> out(300, 0xFFFF);
    ASSERT_TRUE(gc::decode(frame, gc::tensor_view{out.data(), 300, t, 0}, ref()).ok());
    for (std::size_t i = 0; i < 300; ++i) {
      const std::uint16_t h =
          t == gc::dtype::f16 ? gc::blocks::f32_to_f16(want[i]) : gc::blocks::f32_to_bf16(want[i]);
      ASSERT_EQ(out[i], h) << i;
    }
  }
}

// ---------------------------------------------------------------------------------------

TEST(Sparse, FrameSizesFollowTheLayoutFormula) {
  for (gc::dtype t : {gc::dtype::f32, gc::dtype::f16, gc::dtype::bf16}) {
    const std::uint64_t vsize = gc::dtype_size(t);
    for (std::uint64_t n : {1u, 5u, 100u, 1001u, 4096u}) {
      tensor in(uniform(n, n), t);
      for (gc::codec_id id : {gc::codec_id::topk, gc::codec_id::dgc, gc::codec_id::randomk}) {
        for (std::uint64_t k : {std::uint64_t{0}, std::uint64_t{1}, std::uint64_t{3}, n}) {
          SCOPED_TRACE(::testing::Message()
                       << "codec " << static_cast<int>(id) << " n " << n << " k " << k);
          auto spec = gc::make_spec(id);
          spec.k = k;
          const std::uint64_t kk =
              k > 0 ? std::min(k, n)
                    : std::max<std::uint64_t>(
                          1, static_cast<std::uint64_t>(spec.ratio * static_cast<double>(n)));
          const std::uint64_t payload_bytes = id == gc::codec_id::randomk
                                                  ? align16(16 + kk * vsize)
                                                  : align16(align16(kk * vsize) + 4 * kk);
          const auto frame = encode_ok(spec, {}, in.view());
          EXPECT_EQ(frame.size(), 48 + payload_bytes);
          EXPECT_EQ(frame.size(), gc::encode_bound(spec, n, t));
          EXPECT_EQ(header_of(frame).count, kk);
        }
      }
      // threshold: m = number of |v| >= tau.
      auto spec = gc::make_spec(gc::codec_id::threshold);
      spec.tau = 0.5f;
      const auto m = static_cast<std::uint64_t>(std::count_if(
          in.exact.begin(), in.exact.end(), [](float x) { return std::fabs(x) >= 0.5f; }));
      const auto frame = encode_ok(spec, {}, in.view());
      EXPECT_EQ(frame.size(), 48 + align16(align16(m * vsize) + 4 * m));
      EXPECT_EQ(header_of(frame).count, m);
    }
  }
}

TEST(Sparse, SameContextGivesIdenticalBytes) {
  tensor in(uniform(5000, 11), gc::dtype::f32);
  const gc::context ctx{42, 7, 3};
  for (gc::codec_id id :
       {gc::codec_id::topk, gc::codec_id::dgc, gc::codec_id::randomk, gc::codec_id::threshold}) {
    auto spec = gc::make_spec(id);
    spec.unbiased = true;
    const auto a = encode_ok(spec, ctx, in.view());
    const auto b = encode_ok(spec, ctx, in.view());
    ASSERT_EQ(a.size(), b.size());
    EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size()), 0) << static_cast<int>(id);
  }
}

// ---------------------------------------------------------------------------------------

//! Random-k indices as docs/codecs.md defines them.
std::vector<std::uint64_t> randomk_indices(std::uint64_t n, std::uint64_t k,
                                           const gc::context& ctx) {
  const auto rng = gc::blocks::counter_rng::make(ctx.seed, ctx.step, ctx.tensor_id);
  std::vector<std::uint64_t> idx;
  for (std::uint64_t j = 0; j < k; ++j) {
    const auto lo = static_cast<std::uint64_t>(static_cast<u128>(j) * n / k);
    const auto hi = static_cast<std::uint64_t>(static_cast<u128>(j + 1) * n / k);
    idx.push_back(lo +
                  gc::blocks::scale_u32(rng.at(gc::blocks::rng_stream::selection, j), hi - lo));
  }
  return idx;
}

std::vector<std::uint64_t> nonzero_positions(const std::vector<float>& d) {
  std::vector<std::uint64_t> p;
  for (std::size_t i = 0; i < d.size(); ++i)
    if (d[i] != 0.0f) p.push_back(i);
  return p;
}

TEST(RandomK, OneDistinctIndexPerStratumAsSpecified) {
  const std::uint64_t n = 1003;
  std::vector<float> v(n);
  for (std::uint64_t i = 0; i < n; ++i) v[i] = 1.0f + static_cast<float>(i);  // never zero
  tensor in(v, gc::dtype::f32);
  for (std::uint64_t k : {1u, 7u, 10u, 333u, 1002u, 1003u}) {
    const gc::context ctx{99, 5, 17};
    const auto frame = encode_ok(spec_k(gc::codec_id::randomk, k), ctx, in.view());
    const auto got = nonzero_positions(decode_ok(frame));
    ASSERT_EQ(got.size(), k);
    for (std::uint64_t j = 0; j < k; ++j) {
      EXPECT_GE(got[j], j * n / k) << "k " << k << " stratum " << j;
      EXPECT_LT(got[j], (j + 1) * n / k) << "k " << k << " stratum " << j;
    }
    EXPECT_EQ(got, randomk_indices(n, k, ctx));
    // Payload: the generator state, then the values at those indices.
    const auto rng = gc::blocks::counter_rng::make(ctx.seed, ctx.step, ctx.tensor_id);
    const std::uint32_t state[4] = {rng.key.k0, rng.key.k1, rng.step_lo, rng.tensor_lo};
    EXPECT_EQ(std::memcmp(payload(frame), state, 16), 0);
    for (std::uint64_t j = 0; j < k; ++j) {
      float x;
      std::memcpy(&x, payload(frame) + 16 + 4 * j, 4);
      EXPECT_EQ(x, v[got[j]]);
    }
    EXPECT_EQ(header_of(frame).mode, 0);
  }
}

TEST(RandomK, StepChangesIndicesAndHalfWireStoresValues) {
  const std::uint64_t n = 1000;
  std::vector<float> v(n);
  for (std::uint64_t i = 0; i < n; ++i) v[i] = 0.5f + static_cast<float>(i % 50);
  for (gc::dtype t : {gc::dtype::f32, gc::dtype::f16, gc::dtype::bf16}) {
    tensor in(v, t);
    const auto a = nonzero_positions(
        decode_ok(encode_ok(spec_k(gc::codec_id::randomk, 10), {1, 0, 0}, in.view())));
    const auto b = nonzero_positions(
        decode_ok(encode_ok(spec_k(gc::codec_id::randomk, 10), {1, 1, 0}, in.view())));
    const auto c = nonzero_positions(
        decode_ok(encode_ok(spec_k(gc::codec_id::randomk, 10), {1, 0, 1}, in.view())));
    EXPECT_NE(a, b);
    EXPECT_NE(a, c);
    EXPECT_EQ(a, randomk_indices(n, 10, {1, 0, 0}));
    EXPECT_EQ(b, randomk_indices(n, 10, {1, 1, 0}));
  }
}

TEST(RandomK, UnbiasedScalingMeanWithinFiveSigma) {
  // n = 103 in k = 10 strata: sizes 10 and 11. Element i of a stratum of size S decodes to
  // v*S with probability 1/S, else 0: mean v, variance v^2 (S - 1).
  const std::uint64_t n = 103, k = 10, trials = 1000;
  auto v = uniform(n, 5);
  tensor in(v, gc::dtype::f32);
  auto spec = spec_k(gc::codec_id::randomk, k);
  spec.unbiased = true;
  std::vector<double> sum(n, 0.0);
  for (std::uint64_t seed = 0; seed < trials; ++seed) {
    const auto frame = encode_ok(spec, {seed, 3, 1}, in.view());
    ASSERT_EQ(header_of(frame).mode, gc::mode_unbiased);
    const auto d = decode_ok(frame);
    for (std::uint64_t i = 0; i < n; ++i) sum[i] += d[i];
  }
  for (std::uint64_t j = 0; j < k; ++j) {
    const std::uint64_t lo = j * n / k, hi = (j + 1) * n / k, size = hi - lo;
    for (std::uint64_t i = lo; i < hi; ++i) {
      const double mean = sum[i] / trials;
      const double sigma = std::fabs(v[i]) * std::sqrt(static_cast<double>(size - 1) / trials);
      EXPECT_LE(std::fabs(mean - v[i]), 5 * sigma + 1e-6 * std::fabs(v[i])) << "element " << i;
    }
  }
  // And the sent value is exactly v * (float)S in f32.
  const gc::context ctx{8, 3, 1};
  const auto d = decode_ok(encode_ok(spec, ctx, in.view()));
  const auto idx = randomk_indices(n, k, ctx);
  for (std::uint64_t j = 0; j < k; ++j) {
    const std::uint64_t size = (j + 1) * n / k - j * n / k;
    EXPECT_EQ(bits(d[idx[j]]), bits(v[idx[j]] * static_cast<float>(size)));
  }
}

TEST(RandomK, NonFiniteFlagOnlyForSentValues) {
  const std::uint64_t n = 100;
  const gc::context ctx{4, 4, 4};
  const auto idx = randomk_indices(n, 1, ctx);
  auto v = uniform(n, 9);
  v[(idx[0] + 1) % n] = qnan;  // not sent: not seen
  tensor unsent(v, gc::dtype::f32);
  auto f = encode_ok(spec_k(gc::codec_id::randomk, 1), ctx, unsent.view());
  EXPECT_EQ(header_of(f).flags & gc::flag_nonfinite, 0);
  v[idx[0]] = -inf;  // sent: flagged and visible
  tensor sent(v, gc::dtype::f32);
  f = encode_ok(spec_k(gc::codec_id::randomk, 1), ctx, sent.view());
  EXPECT_NE(header_of(f).flags & gc::flag_nonfinite, 0);
  EXPECT_EQ(decode_ok(f)[idx[0]], -inf);
}

TEST(RandomK, ScaleU32IsExactForLargeRanges) {
  // Strata and DGC strides reach 2^48: scale_u32 must be floor(r * m / 2^32) for any m.
  for (std::uint64_t m :
       {std::uint64_t{1}, std::uint64_t{1000}, std::uint64_t{0xFFFFFFFF}, std::uint64_t{1} << 32,
        (std::uint64_t{1} << 32) + 12345, std::uint64_t{1} << 48, (std::uint64_t{1} << 48) - 7,
        ~std::uint64_t{0}}) {
    for (std::uint32_t r : {0u, 1u, 0x80000000u, 0xDEADBEEFu, 0xFFFFFFFFu}) {
      const auto want = static_cast<std::uint64_t>((static_cast<u128>(r) * m) >> 32);
      EXPECT_EQ(gc::blocks::scale_u32(r, m), want) << r << " * " << m;
      EXPECT_LT(gc::blocks::scale_u32(r, m), m);
    }
  }
}

// ---------------------------------------------------------------------------------------

TEST(Dgc, EqualsExactTopKWhenTheThresholdFindsEnough) {
  for (gc::dtype t : {gc::dtype::f32, gc::dtype::bf16}) {
    for (auto& [name, values] : datasets(4000)) {
      for (double sample : {0.01, 0.1, 1.0}) {
        for (std::uint64_t k : {0u, 1u, 40u, 400u}) {
          SCOPED_TRACE(::testing::Message() << name << " sample " << sample << " k " << k);
          tensor in(values, t);
          auto spec = gc::make_spec(gc::codec_id::dgc);
          spec.k = k;
          spec.sample = sample;
          const std::uint64_t kk = k == 0 ? 280 : k;  // default ratio 0.07 of 4000
          for (std::uint64_t step = 0; step < 3; ++step) {
            const auto frame = encode_ok(spec, {5, step, 2}, in.view());
            const auto h = header_of(frame);
            EXPECT_EQ(h.codec, gc::codec_id::dgc);
            EXPECT_EQ(h.count, kk);
            EXPECT_EQ(bits(h.param), bits(static_cast<float>(sample)));
            expect_payload(frame, sparse_payload(in.exact, oracle_top(in.exact, kk), t), name);
          }
        }
      }
    }
  }
}

//! n = 1024, sample 1/8: s = 128 positions start + 8j; k = 512 gives ks = 64.
struct dgc_case {
  static constexpr std::uint64_t n = 1024, stride = 8, k = 512;
  gc::context ctx{77, 12, 5};
  std::uint64_t start() const {
    const auto rng = gc::blocks::counter_rng::make(ctx.seed, ctx.step, ctx.tensor_id);
    return gc::blocks::scale_u32(rng.at(gc::blocks::rng_stream::sampling, 0), stride);
  }
  gc::codec_spec spec() const {
    auto s = spec_k(gc::codec_id::dgc, k);
    s.sample = 0.125;
    return s;
  }
};

TEST(Dgc, FallbackSendsCandidatesThenLowestIndices) {
  // Sampled elements 1000, the rest 1..7: thresholds 1000, 500, 250, 125 each pass only the
  // 128 sampled elements (< k), so the frame holds them plus the 384 lowest other indices.
  dgc_case dc;
  std::vector<float> v(dc.n);
  for (std::uint64_t i = 0; i < dc.n; ++i) v[i] = static_cast<float>(1 + i % 7);
  std::vector<std::uint64_t> want;
  for (std::uint64_t j = 0; j < dc.n / dc.stride; ++j)
    v[dc.start() + j * dc.stride] = (j % 2) ? 1000.0f : -1000.0f;
  std::uint64_t others = 0;
  for (std::uint64_t i = 0; i < dc.n; ++i) {
    if (std::fabs(v[i]) == 1000.0f)
      want.push_back(i);
    else if (others < dc.k - 128)
      want.push_back(i), ++others;
  }
  tensor in(v, gc::dtype::f32);
  const auto frame = encode_ok(dc.spec(), dc.ctx, in.view());
  expect_payload(frame, sparse_payload(in.exact, want, gc::dtype::f32), "fallback");
  EXPECT_NE(want, oracle_top(in.exact, dc.k));  // the exact top-k prefers the larger rest

  // With the rest at 300..306, the third threshold (250) passes everything: exact top-k.
  for (auto& x : v)
    if (x < 10.0f) x += 299.0f;
  tensor in2(v, gc::dtype::f32);
  expect_payload(encode_ok(dc.spec(), dc.ctx, in2.view()),
                 sparse_payload(in2.exact, oracle_top(in2.exact, dc.k), gc::dtype::f32),
                 "third round");
  // With the rest at 100..106, even 125 is too high: fallback again.
  for (auto& x : v)
    if (x < 400.0f) x -= 200.0f;
  tensor in3(v, gc::dtype::f32);
  expect_payload(encode_ok(dc.spec(), dc.ctx, in3.view()),
                 sparse_payload(in3.exact, want, gc::dtype::f32), "fourth round");
}

TEST(Dgc, NonFiniteSampleDoesNotRaiseTheThreshold) {
  // Every sampled element is NaN: the threshold comes from keys 0, everything is a
  // candidate, and the result is the exact top-k (NaN first).
  dgc_case dc;
  auto v = uniform(dc.n, 21);
  for (std::uint64_t j = 0; j < dc.n / dc.stride; ++j) v[dc.start() + j * dc.stride] = qnan;
  tensor in(v, gc::dtype::f32);
  for (std::uint64_t k : {5u, 128u, 200u}) {
    auto spec = dc.spec();
    spec.k = k;
    const auto frame = encode_ok(spec, dc.ctx, in.view());
    expect_payload(frame, sparse_payload(in.exact, oracle_top(in.exact, k), gc::dtype::f32),
                   "nan sample");
    EXPECT_NE(header_of(frame).flags & gc::flag_nonfinite, 0);
  }
}

// ---------------------------------------------------------------------------------------

gc::codec_spec threshold_spec(float tau, std::uint64_t cap = 0) {
  auto s = gc::make_spec(gc::codec_id::threshold);
  s.tau = tau;
  s.cap = cap;
  return s;
}

std::vector<std::uint64_t> threshold_oracle(const std::vector<float>& v, float tau) {
  std::vector<std::uint64_t> c;
  for (std::size_t i = 0; i < v.size(); ++i)
    if (!std::isfinite(v[i]) || std::fabs(v[i]) >= tau) c.push_back(i);
  return c;
}

TEST(Threshold, KeepsEveryElementAtOrAboveTau) {
  for (gc::dtype t : {gc::dtype::f32, gc::dtype::f16, gc::dtype::bf16}) {
    for (auto& [name, values] : datasets(2000)) {
      for (float tau : {0.0f, 0.25f, 0.5f, 0.9f}) {
        SCOPED_TRACE(::testing::Message() << name << " tau " << tau);
        tensor in(values, t);
        const auto frame = encode_ok(threshold_spec(tau), {}, in.view());
        const auto idx = threshold_oracle(in.exact, tau);
        const auto h = header_of(frame);
        EXPECT_EQ(h.count, idx.size());
        EXPECT_EQ(bits(h.param), bits(tau));
        expect_payload(frame, sparse_payload(in.exact, idx, t), name);
        EXPECT_TRUE(same_bits(decode_ok(frame), sparse_dense(in.exact, idx, t)));
      }
    }
  }
}

TEST(Threshold, EmptySelectionIsAValidFrame) {
  std::vector<float> v(500, 0.0f);
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = (i % 2 ? -1e-4f : 1e-4f);
  tensor in(v, gc::dtype::f32);
  const auto frame = encode_ok(threshold_spec(1e-3f), {}, in.view());
  ASSERT_EQ(frame.size(), gc::header_bytes);
  EXPECT_EQ(header_of(frame).count, 0u);
  EXPECT_EQ(header_of(frame).payload_bytes, 0u);
  EXPECT_TRUE(same_bits(decode_ok(frame), std::vector<float>(500, 0.0f)));
  std::vector<float> acc = uniform(500, 4);
  const auto before = acc;
  ASSERT_TRUE(gc::decode_accumulate(frame, gc::view(acc), 2.0f, ref()).ok());
  EXPECT_TRUE(same_bits(acc, before));
}

TEST(Threshold, CapKeepsTheLargestByKey) {
  auto v = datasets(3000)[4].second;                           // NaN and Inf included
  for (std::size_t i = 0; i < v.size(); i += 7) v[i] = 0.75f;  // ties at the cap boundary
  tensor in(v, gc::dtype::f32);
  const auto all = threshold_oracle(in.exact, 0.5f);
  for (std::uint64_t cap :
       {std::uint64_t{1}, std::uint64_t{2}, std::uint64_t{50}, std::uint64_t{all.size() - 1},
        std::uint64_t{all.size()}, std::uint64_t{all.size() + 10}}) {
    SCOPED_TRACE(cap);
    const auto frame = encode_ok(threshold_spec(0.5f, cap), {}, in.view());
    const auto want = oracle_top(in.exact, cap, all);
    EXPECT_EQ(header_of(frame).count, want.size());
    expect_payload(frame, sparse_payload(in.exact, want, gc::dtype::f32), "cap");
  }
  const auto one = encode_ok(threshold_spec(0.5f, 1), {}, in.view());
  // NaN ranks above Inf; of the two NaNs (indices 3 and 600) the lower index wins.
  EXPECT_TRUE(std::isnan(decode_ok(one)[3]));
  EXPECT_EQ(decode_ok(one)[v.size() / 5], 0.0f);
}

TEST(Threshold, OneByteShortIsOutputTooSmallAndWritesNothingPast) {
  tensor in(uniform(1000, 13), gc::dtype::f32);
  const auto spec = threshold_spec(0.6f);
  const auto good = encode_ok(spec, {}, in.view());
  ASSERT_GT(good.size(), gc::header_bytes);
  const std::size_t guard = 256;
  std::vector<std::byte> buf(good.size() - 1 + guard, std::byte{0x5A});
  auto r = gc::encode(spec, {}, in.view(), gc::mutable_bytes(buf.data(), good.size() - 1), ref());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code(), gc::status_code::output_too_small);
  for (std::size_t i = good.size() - 1; i < buf.size(); ++i)
    ASSERT_EQ(buf[i], std::byte{0x5A}) << i;
  // Exactly the frame size fits.
  std::vector<std::byte> exact(good.size() + guard, std::byte{0x5A});
  r = gc::encode(spec, {}, in.view(), gc::mutable_bytes(exact.data(), good.size()), ref());
  ASSERT_TRUE(r.ok()) << r.error().message();
  EXPECT_EQ(std::memcmp(exact.data(), good.data(), good.size()), 0);
  for (std::size_t i = good.size(); i < exact.size(); ++i)
    ASSERT_EQ(exact[i], std::byte{0x5A}) << i;
  // The same for topk and randomk.
  for (gc::codec_id id : {gc::codec_id::topk, gc::codec_id::dgc, gc::codec_id::randomk}) {
    const auto s = spec_k(id, 100);
    const auto f = encode_ok(s, {}, in.view());
    std::vector<std::byte> b(f.size() - 1 + guard, std::byte{0x5A});
    std::vector<std::byte> ws(
        gc::workspace_size(s, in.view(), gc::operation::encode, ref()).value_or(0));
    auto o = ref();
    o.workspace = ws;
    auto rr = gc::encode(s, {}, in.view(), gc::mutable_bytes(b.data(), f.size() - 1), o);
    ASSERT_FALSE(rr.ok());
    EXPECT_EQ(rr.error().code(), gc::status_code::output_too_small);
    for (std::size_t i = f.size() - 1; i < b.size(); ++i) ASSERT_EQ(b[i], std::byte{0x5A}) << i;
  }
}

// ---------------------------------------------------------------------------------------

std::vector<std::pair<const char*, gc::codec_spec>> all_sparse_specs() {
  auto rk = spec_k(gc::codec_id::randomk, 90);
  rk.unbiased = true;
  auto dgc = spec_k(gc::codec_id::dgc, 60);
  dgc.sample = 0.05;
  return {{"topk", spec_k(gc::codec_id::topk, 50)},
          {"dgc", dgc},
          {"randomk", rk},
          {"randomk biased", spec_k(gc::codec_id::randomk, 33)},
          {"threshold", threshold_spec(0.8f)},
          {"threshold capped", threshold_spec(0.5f, 40)}};
}

TEST(Sparse, DecodeAccumulateIsFmaOfDecode) {
  tensor in(uniform(900, 17), gc::dtype::f32);
  for (auto& [name, spec] : all_sparse_specs()) {
    SCOPED_TRACE(name);
    const auto frame = encode_ok(spec, {3, 1, 4}, in.view());
    const auto d = decode_ok(frame);
    for (float alpha : {1.0f, 0.75f, -1.5f}) {
      auto acc = uniform(900, 23);
      std::vector<float> want(900);
      for (std::size_t i = 0; i < 900; ++i) want[i] = std::fma(alpha, d[i], acc[i]);
      ASSERT_TRUE(gc::decode_accumulate(frame, gc::view(acc), alpha, ref()).ok());
      EXPECT_TRUE(same_bits(acc, want)) << alpha;
      // A bf16 accumulator: fma in f32, then one rounding to bf16.
      tensor acc16(uniform(900, 29), gc::dtype::bf16);
      std::vector<std::uint16_t> want16(900);
      for (std::size_t i = 0; i < 900; ++i)
        want16[i] = gc::blocks::f32_to_bf16(std::fma(alpha, d[i], acc16.exact[i]));
      ASSERT_TRUE(gc::decode_accumulate(frame, acc16.view(), alpha, ref()).ok());
      EXPECT_EQ(acc16.half, want16) << alpha;
    }
  }
}

TEST(Sparse, ErrorFeedbackResidualIsExactlyWhatWasNotSent) {
  for (gc::dtype t : {gc::dtype::f32, gc::dtype::f16}) {
    tensor grad(uniform(700, 31), t);
    for (auto& [name, spec] : all_sparse_specs()) {
      SCOPED_TRACE(::testing::Message() << name << " dtype " << static_cast<int>(t));
      auto residual = uniform(700, 37);
      for (auto& x : residual) x *= 0.25f;
      for (std::uint64_t step = 0; step < 3; ++step) {
        std::vector<float> p(700);
        for (std::size_t i = 0; i < 700; ++i) p[i] = grad.exact[i] + residual[i];
        auto need =
            gc::workspace_size(spec, grad.view(), gc::operation::encode_with_feedback, ref());
        ASSERT_TRUE(need.ok());
        std::vector<std::byte> ws(need.value());
        auto o = ref();
        o.workspace = ws;
        std::vector<std::byte> out(gc::encode_bound(spec, 700, t));
        auto r =
            gc::encode_with_feedback(spec, {1, step, 0}, grad.view(), gc::view(residual), out, o);
        ASSERT_TRUE(r.ok()) << r.error().message();
        out.resize(r.value());
        EXPECT_EQ(header_of(out).type, t);
        const auto d = decode_ok(out);
        std::vector<float> want(700);
        for (std::size_t i = 0; i < 700; ++i) want[i] = p[i] - d[i];
        EXPECT_TRUE(same_bits(residual, want));
        if (spec.id == gc::codec_id::topk) {  // and the frame is the top-k of p
          tensor pt(p, gc::dtype::f32);
          expect_payload(out, sparse_payload(pt.exact, oracle_top(pt.exact, spec.k), t),
                         "feedback topk");
        }
      }
    }
  }
}

// ---------------------------------------------------------------------------------------

void put_u32(std::vector<std::byte>& frame, std::size_t payload_offset, std::uint32_t v) {
  std::memcpy(frame.data() + gc::header_bytes + payload_offset, &v, 4);
}
std::uint32_t get_u32(const std::vector<std::byte>& frame, std::size_t payload_offset) {
  std::uint32_t v;
  std::memcpy(&v, frame.data() + gc::header_bytes + payload_offset, 4);
  return v;
}

//! decode and decode_accumulate both report corrupt_frame and leave the output as it was.
void expect_corrupt_untouched(const std::vector<std::byte>& frame, std::uint64_t n,
                              const char* what) {
  std::vector<float> out(n);
  std::memset(out.data(), 0xAB, n * 4);
  const auto poison = out;
  auto st = gc::decode(frame, gc::view(out), ref());
  EXPECT_EQ(st.code(), gc::status_code::corrupt_frame) << what;
  EXPECT_EQ(std::memcmp(out.data(), poison.data(), n * 4), 0) << what;
  st = gc::decode_accumulate(frame, gc::view(out), 1.0f, ref());
  EXPECT_EQ(st.code(), gc::status_code::corrupt_frame) << what;
  EXPECT_EQ(std::memcmp(out.data(), poison.data(), n * 4), 0) << what;
}

TEST(Sparse, CorruptIndicesAreRejectedBeforeAnyWrite) {
  const std::uint64_t n = 100;
  tensor in(uniform(n, 41), gc::dtype::f32);
  for (auto spec :
       {spec_k(gc::codec_id::topk, 5), spec_k(gc::codec_id::dgc, 5), threshold_spec(0.9f, 5)}) {
    const auto frame = encode_ok(spec, {}, in.view());
    ASSERT_EQ(header_of(frame).count, 5u);
    const std::size_t io = 32;  // align16(5 * 4)
    auto f = frame;
    put_u32(f, io + 4 * 4, static_cast<std::uint32_t>(n));
    expect_corrupt_untouched(f, n, "index == n");
    f = frame;
    put_u32(f, io + 4 * 4, 0xFFFFFFFFu);
    expect_corrupt_untouched(f, n, "index 2^32-1");
    f = frame;
    put_u32(f, io + 2 * 4, get_u32(frame, io));
    expect_corrupt_untouched(f, n, "not ascending");
    f = frame;
    put_u32(f, io + 2 * 4, get_u32(frame, io + 4));
    expect_corrupt_untouched(f, n, "duplicate");
    f = frame;
    put_u32(f, io + 0, get_u32(frame, io + 4 * 4));
    expect_corrupt_untouched(f, n, "first above last");
  }
}

TEST(Sparse, EmptyCountFramesAreRejectedWhereAnEncoderCannotMakeThem) {
  for (gc::codec_id id : {gc::codec_id::topk, gc::codec_id::dgc, gc::codec_id::randomk}) {
    gc::frame_header h;
    h.codec = id;
    h.n = 10;
    h.count = 0;
    h.payload_bytes = gc::expected_payload_bytes(h).value();
    std::vector<std::byte> frame(gc::header_bytes + h.payload_bytes);
    gc::write_header(h, frame.data());
    expect_corrupt_untouched(frame, 10, "count 0");
  }
}

// ---------------------------------------------------------------------------------------

TEST(Sparse, NanAndInfComeOutOfDecode) {
  auto v = uniform(400, 43);
  v[10] = qnan;
  v[200] = inf;
  v[399] = -inf;
  for (gc::dtype t : {gc::dtype::f32, gc::dtype::f16, gc::dtype::bf16}) {
    tensor in(v, t);
    auto dgc = spec_k(gc::codec_id::dgc, 3);
    for (auto spec :
         {spec_k(gc::codec_id::topk, 3), dgc, threshold_spec(0.5f), threshold_spec(5.0f, 3)}) {
      SCOPED_TRACE(::testing::Message()
                   << static_cast<int>(spec.id) << " dtype " << static_cast<int>(t));
      const auto frame = encode_ok(spec, {}, in.view());
      EXPECT_NE(header_of(frame).flags & gc::flag_nonfinite, 0);
      const auto d = decode_ok(frame);
      EXPECT_TRUE(std::isnan(d[10]));
      EXPECT_EQ(d[200], inf);
      EXPECT_EQ(d[399], -inf);
    }
  }
}

}  // namespace
