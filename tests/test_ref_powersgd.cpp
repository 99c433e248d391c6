// SPDX-License-Identifier: Apache-2.0
// PowerSGD: the compress/rank rules, the shared-seed initial Q, the phase API (low-rank
// recovery, a simulated multi-rank step, error feedback), the stateless reference codec
// and the state checkpoint format.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "gradcodec/blocks/float16.hpp"
#include "gradcodec/blocks/philox.hpp"
#include "gradcodec/gradcodec.hpp"
#include "reference/common.hpp"

namespace gc = gradcodec;
using gc::status_code;

namespace {

const gc::exec_options ref_opt{gc::backend::reference, {}, nullptr, 0};

gc::codec_spec psgd(std::uint32_t rank = 4) {
  gc::codec_spec s = gc::make_spec(gc::codec_id::powersgd);
  s.rank = rank;
  return s;
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

//! rows x cols matrix A B^T with A rows x k and B cols x k (true rank k).
std::vector<float> low_rank(std::uint64_t rows, std::uint64_t cols, std::uint32_t k,
                            std::uint64_t seed) {
  const auto a = uniform(rows * k, seed), b = uniform(cols * k, seed + 1000);
  std::vector<float> m(rows * cols);
  for (std::uint64_t i = 0; i < rows; ++i)
    for (std::uint64_t j = 0; j < cols; ++j) {
      double s = 0;
      for (std::uint32_t c = 0; c < k; ++c) s += static_cast<double>(a[i * k + c]) * b[j * k + c];
      m[i * cols + j] = static_cast<float>(s);
    }
  return m;
}

double rel_error(const std::vector<float>& got, const std::vector<float>& want) {
  double num = 0, den = 0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    const double d = static_cast<double>(got[i]) - want[i];
    num += d * d;
    den += static_cast<double>(want[i]) * want[i];
  }
  return std::sqrt(num / den);
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * 4) == 0;
}

std::uint32_t bits_of(float x) {
  std::uint32_t u;
  std::memcpy(&u, &x, 4);
  return u;
}

//! The state of one rank for one matrix.
struct rank_state {
  std::uint64_t rows, cols;
  std::uint32_t r;
  std::vector<float> q, residual, p, out;
  rank_state(const gc::codec_spec& spec, const gc::context& ctx, std::uint64_t rows_,
             std::uint64_t cols_)
      : rows(rows_),
        cols(cols_),
        r(gc::powersgd_rank(spec, rows_, cols_)),
        q(cols_ * r),
        residual(rows_ * cols_, 0.0f),
        p(rows_ * r),
        out(rows_ * cols_) {
    EXPECT_TRUE(gc::powersgd_init_q(spec, ctx, rows, cols, q).ok());
  }
};

//! One single-rank step (W = 1) on gradient g.
void single_step(const gc::codec_spec& spec, rank_state& s, const std::vector<float>& g, bool ef) {
  ASSERT_TRUE(gc::powersgd_compute_p(spec, gc::view(g, s.rows), s.residual, s.q, s.p).ok());
  ASSERT_TRUE(gc::powersgd_compute_q(spec, s.p, s.residual, s.rows, s.cols, s.q).ok());
  ASSERT_TRUE(gc::powersgd_finish(spec, s.p, s.q, 1, ef, s.residual, gc::view(s.out, s.rows)).ok());
}

std::vector<std::byte> encode_ok(const gc::codec_spec& spec, const gc::context& ctx,
                                 gc::const_tensor_view in) {
  std::vector<std::byte> buf(gc::encode_bound(spec, in.n, in.type, in.rows));
  auto ws_size = gc::workspace_size(spec, in, gc::operation::encode, ref_opt);
  EXPECT_TRUE(ws_size.ok());
  std::vector<std::byte> ws(ws_size.value_or(0));
  gc::exec_options opt = ref_opt;
  opt.workspace = ws;
  auto n = gc::encode(spec, ctx, in, buf, opt);
  EXPECT_TRUE(n.ok()) << n.error().message();
  buf.resize(n.value_or(0));
  return buf;
}

std::vector<float> decode_ok(const std::vector<std::byte>& frame, std::uint64_t n) {
  std::vector<float> out(n, -7.0f);
  auto st = gc::decode(frame, gc::view(out), ref_opt);
  EXPECT_TRUE(st.ok()) << st.message();
  return out;
}

}  // namespace

// --- rules ----------------------------------------------------------------------------

TEST(PowerSgdRules, CompressesOnlyWorthwhileMatrices) {
  const auto s = psgd(4);
  EXPECT_FALSE(gc::powersgd_compresses(s, 1, 100000));  // a 1-D tensor
  EXPECT_FALSE(gc::powersgd_compresses(s, 100000, 1));
  EXPECT_FALSE(gc::powersgd_compresses(s, 0, 0));
  EXPECT_FALSE(gc::powersgd_compresses(s, 8, 8));    // 64 > 2*16*4 = 128 is false
  EXPECT_TRUE(gc::powersgd_compresses(s, 64, 48));   // 3072 > 2*112*4 = 896
  EXPECT_FALSE(gc::powersgd_compresses(s, 16, 16));  // 256 > 256 is false (strict)
  EXPECT_TRUE(gc::powersgd_compresses(s, 17, 16));   // 272 > 264
  auto zero_rate = s;
  zero_rate.min_rate = 0.0f;
  EXPECT_TRUE(gc::powersgd_compresses(zero_rate, 2, 2));
  EXPECT_FALSE(gc::powersgd_compresses(zero_rate, 1, 2));
}

TEST(PowerSgdRules, RankIsClampedToTheShape) {
  EXPECT_EQ(gc::powersgd_rank(psgd(4), 64, 48), 4u);
  EXPECT_EQ(gc::powersgd_rank(psgd(8), 3, 100), 3u);
  EXPECT_EQ(gc::powersgd_rank(psgd(8), 100, 5), 5u);
  EXPECT_EQ(gc::powersgd_rank(psgd(64), 1, 7), 1u);
  EXPECT_EQ(gc::powersgd_rank(psgd(4), 0, 0), 0u);
  // The clamped rank enters the rule: 3 x 100 at rank min(8, 3) = 3: 300 > 2*103*3 is false.
  EXPECT_FALSE(gc::powersgd_compresses(psgd(8), 3, 100));
  EXPECT_TRUE(gc::powersgd_compresses(psgd(1), 3, 100));  // 300 > 206
}

// --- initial Q and orthogonalisation ---------------------------------------------------

TEST(PowerSgdInit, SharedSeedOrthonormalAndKeyedByTensor) {
  const auto s = psgd(4);
  const std::uint64_t rows = 64, cols = 48;
  std::vector<float> a(cols * 4), b(cols * 4), c(cols * 4), d(cols * 4);
  ASSERT_TRUE(gc::powersgd_init_q(s, {42, 0, 7}, rows, cols, a).ok());
  ASSERT_TRUE(gc::powersgd_init_q(s, {42, 0, 7}, rows, cols, b).ok());
  ASSERT_TRUE(gc::powersgd_init_q(s, {42, 0, 8}, rows, cols, c).ok());
  ASSERT_TRUE(gc::powersgd_init_q(s, {42, 99, 7}, rows, cols, d).ok());
  EXPECT_TRUE(same_bits(a, b));
  EXPECT_FALSE(same_bits(a, c)) << "another tensor id must draw another Q";
  EXPECT_TRUE(same_bits(a, d)) << "the step is not part of the key (every step starts alike)";
  for (std::uint32_t x = 0; x < 4; ++x)
    for (std::uint32_t y = 0; y < 4; ++y) {
      double dot = 0;
      for (std::uint64_t j = 0; j < cols; ++j)
        dot += static_cast<double>(a[j * 4 + x]) * a[j * 4 + y];
      EXPECT_NEAR(dot, x == y ? 1.0 : 0.0, 1e-5) << x << "," << y;
    }
}

// init_q and orthogonalize follow docs/codecs.md literally (canonical sums, two roundings
// per projection update, division by nrm + eps).
TEST(PowerSgdInit, MatchesTheDocumentedFormulaBitForBit) {
  const auto s = psgd(3);
  const std::uint64_t rows = 10, cols = 300;  // 300 rows in Q: two canonical-sum chunks
  const std::uint32_t r = 3;
  const auto rng = gc::blocks::counter_rng::make(5, 0, 11);
  std::vector<float> want(cols * r);
  for (std::uint64_t e = 0; e < cols * r; ++e) {
    const auto blk = rng.block(gc::blocks::rng_stream::init, e);
    float u[4];
    for (int k = 0; k < 4; ++k) u[k] = gc::blocks::uniform01(blk.v[k]);
    want[e] = ((u[0] + u[1]) + (u[2] + u[3]) - 2.0f) * 1.7320508f;
  }
  for (std::uint32_t j = 0; j < r; ++j) {
    for (int pass = 0; pass < 2; ++pass)
      for (std::uint32_t i = 0; i < j; ++i) {
        const float dot = gc::reference::canonical_sum(
            cols, [&](std::uint64_t k) { return want[k * r + j] * want[k * r + i]; });
        for (std::uint64_t k = 0; k < cols; ++k) {
          const float t = dot * want[k * r + i];
          want[k * r + j] = want[k * r + j] - t;
        }
      }
    const float sq = gc::reference::canonical_sum(
        cols, [&](std::uint64_t k) { return want[k * r + j] * want[k * r + j]; });
    const float den = std::sqrt(sq) + s.eps;
    for (std::uint64_t k = 0; k < cols; ++k) want[k * r + j] = want[k * r + j] / den;
  }
  std::vector<float> got(cols * r);
  ASSERT_TRUE(gc::powersgd_init_q(s, {5, 123, 11}, rows, cols, got).ok());
  EXPECT_TRUE(same_bits(got, want));
}

TEST(PowerSgdInit, ZeroColumnWithEpsilonStaysZero) {
  std::vector<float> a(20 * 2, 0.0f);
  for (int k = 0; k < 20; ++k) a[k * 2] = 1.0f;  // column 0 nonzero, column 1 zero
  ASSERT_TRUE(gc::powersgd_orthogonalize(a, 20, 2, 1e-8f).ok());
  for (int k = 0; k < 20; ++k) {
    EXPECT_EQ(a[k * 2 + 1], 0.0f);
    EXPECT_NEAR(a[k * 2], 1.0 / std::sqrt(20.0), 1e-7);
  }
  std::vector<float> wrong(7);
  EXPECT_EQ(gc::powersgd_orthogonalize(wrong, 20, 2, 0.0f).code(), status_code::shape_mismatch);
}

// --- the phase API --------------------------------------------------------------------

// A true-rank-2 64 x 48 matrix is recovered to 1e-5 relative Frobenius error on the very
// first step (P = M Q0 spans M's column space), and stays there over warm-started steps.
TEST(PowerSgdPhases, RecoversALowRankMatrix) {
  const std::uint64_t rows = 64, cols = 48;
  const auto m = low_rank(rows, cols, 2, 3);
  for (std::uint32_t rank : {2u, 4u}) {
    const auto s = psgd(rank);
    rank_state st(s, {1, 0, 0}, rows, cols);
    for (int step = 1; step <= 4; ++step) {
      single_step(s, st, m, false);
      const double err = rel_error(st.out, m);
      EXPECT_LE(err, 1e-5) << "rank " << rank << " step " << step;
      for (float x : st.residual) ASSERT_EQ(bits_of(x), 0u) << "error feedback off: residual is +0";
    }
  }
}

// Warm start is a power iteration: on a full-rank matrix with a spectral gap the rank-1
// approximation improves step by step and settles (the error after 10 steps is within
// 0.1% of the error after 40).
TEST(PowerSgdPhases, WarmStartConvergesToTheDominantDirection) {
  const std::uint64_t rows = 40, cols = 30;
  auto m = low_rank(rows, cols, 1, 21);
  const auto m2 = low_rank(rows, cols, 1, 22), noise = uniform(rows * cols, 23);
  for (std::size_t k = 0; k < m.size(); ++k) m[k] = m[k] + 0.5f * m2[k] + 0.01f * noise[k];
  const auto s = psgd(1);
  rank_state st(s, {9, 0, 4}, rows, cols);
  std::vector<double> err;
  for (int step = 0; step < 40; ++step) {
    single_step(s, st, m, false);
    err.push_back(rel_error(st.out, m));
  }
  EXPECT_GT(err[0], err[9]);
  EXPECT_LE(err[9], err[39] * 1.001);
  EXPECT_LT(err[39], 0.9);
}

// W = 3 ranks with different gradients; the two allreduce-sums are simulated by adding the
// ranks' arrays. Every rank ends with the same Q and output bits, and the residual is
// exactly M - out on each rank.
TEST(PowerSgdPhases, MultiRankStepIsIdenticalOnEveryRankWithExactFeedback) {
  const std::uint64_t rows = 40, cols = 300;
  const auto s = psgd(3);
  const gc::context ctx{77, 0, 5};
  std::vector<rank_state> ranks;
  for (int w = 0; w < 3; ++w) ranks.emplace_back(s, ctx, rows, cols);
  for (int step = 0; step < 3; ++step) {
    std::vector<std::vector<float>> grads, m_before;
    for (int w = 0; w < 3; ++w) grads.push_back(uniform(rows * cols, 100 + 10 * step + w));
    for (int w = 0; w < 3; ++w)
      ASSERT_TRUE(gc::powersgd_compute_p(s, gc::view(grads[w], rows), ranks[w].residual, ranks[w].q,
                                         ranks[w].p)
                      .ok());
    std::vector<float> sum(ranks[0].p.size(), 0.0f);
    for (int w = 0; w < 3; ++w)
      for (std::size_t k = 0; k < sum.size(); ++k) sum[k] = sum[k] + ranks[w].p[k];
    for (int w = 0; w < 3; ++w) {
      ranks[w].p = sum;
      ASSERT_TRUE(
          gc::powersgd_compute_q(s, ranks[w].p, ranks[w].residual, rows, cols, ranks[w].q).ok());
      m_before.push_back(ranks[w].residual);
    }
    std::vector<float> qsum(ranks[0].q.size(), 0.0f);
    for (int w = 0; w < 3; ++w)
      for (std::size_t k = 0; k < qsum.size(); ++k) qsum[k] = qsum[k] + ranks[w].q[k];
    for (int w = 0; w < 3; ++w) {
      ranks[w].q = qsum;
      ASSERT_TRUE(gc::powersgd_finish(s, ranks[w].p, ranks[w].q, 3, true, ranks[w].residual,
                                      gc::view(ranks[w].out, rows))
                      .ok());
    }
    for (int w = 1; w < 3; ++w) {
      EXPECT_TRUE(same_bits(ranks[w].out, ranks[0].out)) << "step " << step << " rank " << w;
      EXPECT_TRUE(same_bits(ranks[w].q, ranks[0].q)) << "step " << step << " rank " << w;
    }
    for (int w = 0; w < 3; ++w)
      for (std::size_t k = 0; k < m_before[w].size(); ++k)
        ASSERT_EQ(bits_of(ranks[w].residual[k]), bits_of(m_before[w][k] - ranks[w].out[k]))
            << "step " << step << " rank " << w << " element " << k;
    // Q keeps the mean: qsum / 3 element by element.
    for (std::size_t k = 0; k < qsum.size(); ++k)
      ASSERT_EQ(bits_of(ranks[0].q[k]), bits_of(qsum[k] / 3.0f));
  }
}

// orthogonalize_batch then project_q is compute_q per layer, bit for bit; bad batches are
// refused before any matrix is touched.
TEST(PowerSgdPhases, BatchedOrthogonalizationAndProjectionEqualComputeQ) {
  gc::codec_spec spec = gc::make_spec(gc::codec_id::powersgd);
  spec.rank = 3;
  struct shape {
    std::uint64_t rows, cols;
  };
  const shape shapes[] = {{7, 5}, {40, 33}, {1, 9}, {65, 2}, {12, 12}};
  // One buffer holding every P back to back, as the dense strategy keeps them.
  std::vector<std::uint64_t> at;
  std::uint64_t total = 0;
  for (const auto& s : shapes) {
    at.push_back(total);
    total += s.rows * gc::powersgd_rank(spec, s.rows, s.cols);
  }
  std::vector<float> p_batch = uniform(total, 77);
  p_batch[0] = p_batch[1] = 0.0f;  // a zero entry in the first layer's first column
  std::vector<float> p_each = p_batch;
  std::vector<gc::powersgd_matrix> batch;
  for (std::size_t t = 0; t < std::size(shapes); ++t) {
    const std::uint32_t r = gc::powersgd_rank(spec, shapes[t].rows, shapes[t].cols);
    batch.push_back({{p_batch.data() + at[t], shapes[t].rows * r}, shapes[t].rows, r});
  }
  ASSERT_TRUE(gc::powersgd_orthogonalize_batch(batch, spec.eps).ok());
  for (std::size_t t = 0; t < std::size(shapes); ++t) {
    const auto& s = shapes[t];
    const std::uint32_t r = gc::powersgd_rank(spec, s.rows, s.cols);
    const std::vector<float> m = uniform(s.rows * s.cols, 100 + t);
    std::vector<float> q_each(s.cols * r), q_proj(s.cols * r);
    ASSERT_TRUE(
        gc::powersgd_compute_q(spec, {p_each.data() + at[t], s.rows * r}, m, s.rows, s.cols, q_each)
            .ok());
    ASSERT_TRUE(gc::powersgd_project_q(spec, {p_batch.data() + at[t], s.rows * r}, m, s.rows,
                                       s.cols, q_proj)
                    .ok());
    EXPECT_TRUE(same_bits(q_proj, q_each)) << "layer " << t;
  }
  EXPECT_TRUE(same_bits(p_batch, p_each)) << "orthogonalised P";
  // Bad batches are refused before any matrix is touched.
  const auto before = p_batch;
  auto overlapping = batch;
  overlapping[1].a = {p_batch.data() + at[1] - 1, overlapping[1].a.size()};
  EXPECT_EQ(gc::powersgd_orthogonalize_batch(overlapping, spec.eps).code(),
            status_code::invalid_argument);
  auto short_one = batch;
  short_one[2].a = short_one[2].a.first(short_one[2].a.size() - 1);
  EXPECT_EQ(gc::powersgd_orthogonalize_batch(short_one, spec.eps).code(),
            status_code::shape_mismatch);
  EXPECT_TRUE(same_bits(p_batch, before));
  EXPECT_TRUE(gc::powersgd_orthogonalize_batch({}, spec.eps).ok());
  // Empty matrices (even one pointing past the buffer) are skipped.
  auto with_empty = batch;
  with_empty.insert(with_empty.begin(), {{p_batch.data() + total, 0}, 0, 3});
  EXPECT_TRUE(gc::powersgd_orthogonalize_batch(with_empty, spec.eps).ok());
}

// With a 16-bit output the residual uses the f32 value of out, before rounding.
TEST(PowerSgdPhases, FeedbackUsesTheF32OutputBeforeDtypeRounding) {
  const std::uint64_t rows = 24, cols = 20;
  const auto s = psgd(2);
  rank_state a(s, {3, 0, 1}, rows, cols);
  const auto g = uniform(rows * cols, 8);
  ASSERT_TRUE(gc::powersgd_compute_p(s, gc::view(g, rows), a.residual, a.q, a.p).ok());
  ASSERT_TRUE(gc::powersgd_compute_q(s, a.p, a.residual, rows, cols, a.q).ok());
  auto p2 = a.p, q2 = a.q, res2 = a.residual;
  const auto m = a.residual;
  std::vector<std::uint16_t> out16(rows * cols);
  ASSERT_TRUE(gc::powersgd_finish(s, a.p, a.q, 1, true, a.residual,
                                  gc::tensor_view{out16.data(), rows * cols, gc::dtype::bf16, rows})
                  .ok());
  ASSERT_TRUE(gc::powersgd_finish(s, p2, q2, 1, true, res2, gc::view(a.out, rows)).ok());
  EXPECT_TRUE(same_bits(a.residual, res2));
  EXPECT_TRUE(same_bits(a.q, q2)) << "W = 1 leaves q unchanged either way";
  for (std::size_t k = 0; k < out16.size(); ++k) {
    ASSERT_EQ(out16[k], gc::blocks::f32_to_bf16(a.out[k]));
    ASSERT_EQ(bits_of(a.residual[k]), bits_of(m[k] - a.out[k]));
  }
}

// A single-rank first step (Q = init_q, no feedback) is exactly the stateless codec.
TEST(PowerSgdPhases, FirstSingleRankStepEqualsTheStatelessCodec) {
  const std::uint64_t rows = 33, cols = 270;
  const auto s = psgd(4);
  const gc::context ctx{12, 3, 9};
  const auto g = uniform(rows * cols, 31);
  rank_state st(s, ctx, rows, cols);
  single_step(s, st, g, false);
  const auto frame = encode_ok(s, ctx, gc::view(g, rows));
  const auto l = gc::blocks::powersgd_layout_of(rows, cols, 4);
  ASSERT_EQ(frame.size(), gc::header_bytes + l.total);
  EXPECT_EQ(std::memcmp(frame.data() + gc::header_bytes + l.p_offset, st.p.data(), l.p_bytes), 0);
  EXPECT_EQ(std::memcmp(frame.data() + gc::header_bytes + l.q_offset, st.q.data(), l.q_bytes), 0);
  EXPECT_TRUE(same_bits(decode_ok(frame, g.size()), st.out));
}

TEST(PowerSgdPhases, NonFiniteGradientReachesEveryOutputValue) {
  const std::uint64_t rows = 16, cols = 12;
  const auto s = psgd(2);
  for (float bad :
       {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
    rank_state st(s, {1, 0, 0}, rows, cols);
    auto g = uniform(rows * cols, 4);
    g[5 * cols + 3] = bad;
    single_step(s, st, g, true);
    for (float x : st.out) ASSERT_TRUE(std::isnan(x));
    // nonfinite=error refuses the step and leaves the state as it was.
    auto strict = s;
    strict.nonfinite = gc::nonfinite_policy::error;
    rank_state st2(strict, {1, 0, 0}, rows, cols);
    const auto res_before = st2.residual, p_before = st2.p;
    EXPECT_EQ(gc::powersgd_compute_p(strict, gc::view(g, rows), st2.residual, st2.q, st2.p).code(),
              status_code::nonfinite_input);
    EXPECT_TRUE(same_bits(st2.residual, res_before));
    EXPECT_TRUE(same_bits(st2.p, p_before));
  }
}

// Every span-size error returns a status and writes nothing.
TEST(PowerSgdPhases, SizeErrorsReturnAStatusAndWriteNothing) {
  const std::uint64_t rows = 12, cols = 10;
  const auto s = psgd(3);
  const auto g = uniform(rows * cols, 1);
  std::vector<float> res(rows * cols, 0.5f), q(cols * 3, 0.25f), p(rows * 3, 0.75f),
      out(rows * cols, 9.0f);
  std::vector<float> res_short(rows * cols - 1, 0.5f), q_short(cols * 3 - 1), p_long(rows * 3 + 1);
  const auto res0 = res, q0 = q, p0 = p, out0 = out;
  auto untouched = [&] {
    return same_bits(res, res0) && same_bits(q, q0) && same_bits(p, p0) && same_bits(out, out0);
  };
  auto expect = [&](gc::status st, status_code code, const char* what) {
    EXPECT_EQ(st.code(), code) << what << ": " << st.message();
    EXPECT_TRUE(untouched()) << what;
  };
  expect(gc::powersgd_compute_p(s, gc::view(g, rows), res_short, q, p), status_code::shape_mismatch,
         "p: residual");
  expect(gc::powersgd_compute_p(s, gc::view(g, rows), res, q_short, p), status_code::shape_mismatch,
         "p: q");
  expect(gc::powersgd_compute_p(s, gc::view(g, rows), res, q, p_long), status_code::shape_mismatch,
         "p: p");
  expect(gc::powersgd_compute_p(s, gc::view(g, 7), res, q, p), status_code::invalid_argument,
         "p: rows");
  expect(gc::powersgd_compute_p(s, gc::view(g, cols), res, q, p), status_code::shape_mismatch,
         "p: transposed");
  expect(gc::powersgd_compute_q(s, p, res_short, rows, cols, q), status_code::shape_mismatch,
         "q: residual");
  expect(gc::powersgd_compute_q(s, p_long, res, rows, cols, q), status_code::shape_mismatch,
         "q: p");
  expect(gc::powersgd_compute_q(s, p, res, rows, cols, q_short), status_code::shape_mismatch,
         "q: q");
  expect(gc::powersgd_finish(s, p, q, 0, true, res, gc::view(out, rows)),
         status_code::invalid_argument, "world 0");
  expect(gc::powersgd_finish(s, p_long, q, 2, true, res, gc::view(out, rows)),
         status_code::shape_mismatch, "f: p");
  expect(gc::powersgd_finish(s, p, q_short, 2, true, res, gc::view(out, rows)),
         status_code::shape_mismatch, "f: q");
  expect(gc::powersgd_finish(s, p, q, 2, true, res_short, gc::view(out, rows)),
         status_code::shape_mismatch, "f: res");
  expect(gc::powersgd_finish(s, p, q, 2, true, res, gc::view(out)), status_code::shape_mismatch,
         "f: no rows");
  expect(gc::powersgd_init_q(s, {}, rows, cols, q_short), status_code::shape_mismatch, "init: q");
  auto other = gc::make_spec(gc::codec_id::topk);
  expect(gc::powersgd_compute_p(other, gc::view(g, rows), res, q, p), status_code::invalid_argument,
         "spec");
  auto bad_rank = s;
  bad_rank.rank = 65;
  expect(gc::powersgd_compute_p(bad_rank, gc::view(g, rows), res, q, p), status_code::invalid_spec,
         "rank");
  auto st = gc::powersgd_compute_p(s, gc::view(g, rows), res, q_short, p);
  EXPECT_NE(std::string(st.message()).find("q has 29 floats, need 30"), std::string::npos)
      << st.message();
  // Asked for the CUDA backend: host arrays are refused there, and without a GPU the
  // backend is unavailable; either way nothing is written.
  gc::exec_options on_gpu;
  on_gpu.where = gc::backend::cuda;
  const status_code want = gc::backend_available(gc::backend::cuda)
                               ? status_code::invalid_argument
                               : status_code::backend_unavailable;
  expect(gc::powersgd_init_q(s, {}, rows, cols, q, on_gpu), want, "cuda: init");
  expect(gc::powersgd_compute_p(s, gc::view(g, rows), res, q, p, on_gpu), want, "cuda: p");
  expect(gc::powersgd_compute_q(s, p, res, rows, cols, q, on_gpu), want, "cuda: q");
  expect(gc::powersgd_finish(s, p, q, 2, true, res, gc::view(out, rows), on_gpu), want,
         "cuda: finish");
  expect(gc::powersgd_orthogonalize(p, rows, 3, 1e-8f, on_gpu), want, "cuda: orth");
}

// --- the stateless codec --------------------------------------------------------------

TEST(PowerSgdCodec, RankOneMatrixRoundTripsNearlyExactly) {
  const std::uint64_t rows = 64, cols = 48;
  const auto m = low_rank(rows, cols, 1, 17);
  for (std::uint32_t rank : {1u, 4u}) {
    const auto frame = encode_ok(psgd(rank), {1, 2, 3}, gc::view(m, rows));
    auto h = gc::peek(frame);
    ASSERT_TRUE(h.ok());
    EXPECT_EQ(h.value().count, rows);
    EXPECT_EQ(h.value().group, rank);
    EXPECT_EQ(h.value().param, 1e-8f);
    EXPECT_EQ(h.value().flags, 0);
    EXPECT_LE(rel_error(decode_ok(frame, m.size()), m), 1e-5) << "rank " << rank;
  }
}

TEST(PowerSgdCodec, BypassFramesDecodeExactly) {
  const auto s = psgd(4);
  auto v = uniform(100, 5);
  v[3] = -0.0f;
  // 1-D (no rows), a single row, and a 3 x 3 matrix (rank 3: 9 > 2*6*3 is false).
  for (std::uint64_t rows : {0ull, 1ull, 100ull, 10ull}) {
    const std::vector<float> in = rows == 10 ? std::vector<float>(v.begin(), v.begin() + 9) : v;
    const std::uint64_t r = rows == 10 ? 3 : rows;
    const auto frame = encode_ok(s, {}, gc::view(in, r));
    auto h = gc::peek(frame);
    ASSERT_TRUE(h.ok());
    EXPECT_EQ(h.value().group, 0u);
    EXPECT_EQ(h.value().count, r > 0 ? r : 1);
    EXPECT_EQ(h.value().payload_bytes, gc::blocks::align16(in.size() * 4));
    if (r > 0) {
      EXPECT_EQ(frame.size(), gc::encode_bound(s, in.size(), gc::dtype::f32, r));
    }
    EXPECT_LE(frame.size(), gc::encode_bound(s, in.size(), gc::dtype::f32, 0));
    EXPECT_TRUE(same_bits(decode_ok(frame, in.size()), in)) << "rows " << rows;
  }
  // f16 input: widened exactly and sent as f32.
  std::vector<std::uint16_t> h16(v.size());
  for (std::size_t k = 0; k < v.size(); ++k) h16[k] = gc::blocks::f32_to_f16(v[k]);
  const auto frame =
      encode_ok(s, {}, gc::const_tensor_view{h16.data(), h16.size(), gc::dtype::f16, 0});
  EXPECT_EQ(gc::peek(frame).value().type, gc::dtype::f16);
  const auto back = decode_ok(frame, v.size());
  for (std::size_t k = 0; k < v.size(); ++k)
    ASSERT_EQ(bits_of(back[k]), bits_of(gc::blocks::f16_to_f32(h16[k])));
  // The empty tensor.
  std::vector<float> none;
  const auto empty = encode_ok(s, {}, gc::view(none, 4));
  EXPECT_EQ(empty.size(), gc::header_bytes);
  EXPECT_EQ(gc::peek(empty).value().count, 0u);
  EXPECT_TRUE(gc::decode(empty, gc::view(none), ref_opt).ok());
}

TEST(PowerSgdCodec, SizeIsTheFormulaAndTheBound) {
  struct shape {
    std::uint64_t rows, cols;
    std::uint32_t rank;
    float min_rate;
  };
  // 100 x 7 at rank 64: clamped to r = 7, which compresses only below min_rate 2.
  for (const shape& sh : {shape{64, 48, 4, 2.0f}, shape{17, 16, 4, 2.0f}, shape{33, 270, 2, 2.0f},
                          shape{100, 7, 64, 0.5f}, shape{300, 5, 1, 2.0f}}) {
    auto s = psgd(sh.rank);
    s.min_rate = sh.min_rate;
    const std::uint32_t r = gc::powersgd_rank(s, sh.rows, sh.cols);
    ASSERT_TRUE(gc::powersgd_compresses(s, sh.rows, sh.cols)) << sh.rows << "x" << sh.cols;
    const auto m = uniform(sh.rows * sh.cols, sh.rows);
    const auto frame = encode_ok(s, {}, gc::view(m, sh.rows));
    const std::uint64_t want = gc::header_bytes + gc::blocks::align16(sh.rows * r * 4) +
                               gc::blocks::align16(sh.cols * r * 4);
    EXPECT_EQ(frame.size(), want);
    EXPECT_EQ(frame.size(), gc::encode_bound(s, m.size(), gc::dtype::f32, sh.rows));
    // Padding bytes are zero.
    const auto l = gc::blocks::powersgd_layout_of(sh.rows, sh.cols, r);
    for (std::uint64_t b = l.p_bytes; b < l.q_offset; ++b)
      ASSERT_EQ(frame[gc::header_bytes + b], std::byte{0});
    for (std::uint64_t b = l.q_offset + l.q_bytes; b < l.total; ++b)
      ASSERT_EQ(frame[gc::header_bytes + b], std::byte{0});
  }
}

TEST(PowerSgdCodec, SameContextSameBytes) {
  const std::uint64_t rows = 40, cols = 30;
  const auto s = psgd(3);
  const auto m = uniform(rows * cols, 2);
  const auto a = encode_ok(s, {7, 1, 2}, gc::view(m, rows));
  const auto b = encode_ok(s, {7, 1, 2}, gc::view(m, rows));
  const auto c = encode_ok(s, {7, 5, 2}, gc::view(m, rows));
  const auto d = encode_ok(s, {7, 1, 3}, gc::view(m, rows));
  EXPECT_EQ(a, b);
  EXPECT_EQ(a, c) << "the step does not key the initial Q";
  EXPECT_NE(a, d) << "another tensor id draws another Q";
}

TEST(PowerSgdCodec, NonFiniteInputMakesTheWholeMatrixNonFinite) {
  const std::uint64_t rows = 20, cols = 30;
  const auto s = psgd(2);
  for (float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                    -std::numeric_limits<float>::infinity()}) {
    auto m = uniform(rows * cols, 6);
    m[7 * cols + 11] = bad;
    const auto frame = encode_ok(s, {}, gc::view(m, rows));
    EXPECT_NE(gc::peek(frame).value().flags & gc::flag_nonfinite, 0);
    for (float x : decode_ok(frame, m.size())) ASSERT_TRUE(std::isnan(x));
    // Every NaN of the payload (P-hat, Q) is the canonical one: a NaN's bits from the
    // arithmetic would differ between x86 and a GPU. (P-hat's first column keeps the zeros
    // of finite/Inf.)
    const auto h = gc::peek(frame).value();
    int nans = 0;
    for (std::uint64_t at = frame.size() - h.payload_bytes; at + 4 <= frame.size(); at += 4) {
      std::uint32_t w;
      std::memcpy(&w, frame.data() + at, 4);
      if ((w & 0x7F800000u) == 0x7F800000u && (w & 0x007FFFFFu) != 0) {
        ++nans;
        ASSERT_EQ(w, 0x7FC00000u) << "payload byte " << at;
      }
    }
    EXPECT_GT(nans, 0);
    // Dense frames keep the value where it was.
    auto v = uniform(50, 1);
    v[9] = bad;
    const auto dense = encode_ok(s, {}, gc::view(v));
    EXPECT_NE(gc::peek(dense).value().flags & gc::flag_nonfinite, 0);
    EXPECT_EQ(bits_of(decode_ok(dense, v.size())[9]), bits_of(bad));
  }
}

TEST(PowerSgdCodec, DecodeAccumulateIsFmaOfDecode) {
  const std::uint64_t rows = 30, cols = 40;
  const auto s = psgd(3);
  const auto m = uniform(rows * cols, 12);
  for (std::uint64_t r : {rows, std::uint64_t{0}}) {  // compressed and dense frames
    const auto frame = encode_ok(s, {1, 1, 1}, gc::view(m, r));
    const auto dec = decode_ok(frame, m.size());
    auto acc = uniform(m.size(), 13);
    const auto acc0 = acc;
    const float alpha = 0.37f;
    ASSERT_TRUE(gc::decode_accumulate(frame, gc::view(acc), alpha, ref_opt).ok());
    for (std::size_t k = 0; k < acc.size(); ++k)
      ASSERT_EQ(bits_of(acc[k]), bits_of(std::fma(alpha, dec[k], acc0[k]))) << k;
    // bf16 accumulator: fma in f32, then rounded.
    std::vector<std::uint16_t> acc16(m.size());
    for (std::size_t k = 0; k < acc16.size(); ++k) acc16[k] = gc::blocks::f32_to_bf16(acc0[k]);
    const auto acc16_0 = acc16;
    ASSERT_TRUE(
        gc::decode_accumulate(
            frame, gc::tensor_view{acc16.data(), acc16.size(), gc::dtype::bf16, 0}, alpha, ref_opt)
            .ok());
    for (std::size_t k = 0; k < acc16.size(); ++k)
      ASSERT_EQ(acc16[k], gc::blocks::f32_to_bf16(
                              std::fma(alpha, dec[k], gc::blocks::bf16_to_f32(acc16_0[k]))));
  }
}

TEST(PowerSgdCodec, GenericErrorFeedbackLeavesTheApproximationError) {
  const std::uint64_t rows = 24, cols = 32;
  const auto s = psgd(2);
  const auto g = uniform(rows * cols, 40);
  auto res = uniform(rows * cols, 41);
  for (auto& x : res) x = x * 0.1f;
  const auto res0 = res;
  std::vector<std::byte> buf(gc::encode_bound(s, g.size(), gc::dtype::f32, rows));
  auto need =
      gc::workspace_size(s, gc::view(g, rows), gc::operation::encode_with_feedback, ref_opt);
  ASSERT_TRUE(need.ok());
  std::vector<std::byte> ws(need.value());
  gc::exec_options opt = ref_opt;
  opt.workspace = ws;
  auto n = gc::encode_with_feedback(s, {}, gc::view(g, rows), gc::view(res, rows), buf, opt);
  ASSERT_TRUE(n.ok()) << n.error().message();
  buf.resize(n.value());
  const auto d = decode_ok(buf, g.size());
  for (std::size_t k = 0; k < g.size(); ++k)
    ASSERT_EQ(bits_of(res[k]), bits_of((g[k] + res0[k]) - d[k]));
}

TEST(PowerSgdCodec, WorkspaceIsRequiredAndHeaderChecked) {
  const std::uint64_t rows = 64, cols = 48;
  const auto s = psgd(4);
  const auto m = uniform(rows * cols, 2);
  auto need = gc::workspace_size(s, gc::view(m, rows), gc::operation::encode, ref_opt);
  ASSERT_TRUE(need.ok());
  EXPECT_GE(need.value(), (cols * 4 + rows * 4) * 4);
  std::vector<std::byte> buf(gc::encode_bound(s, m.size(), gc::dtype::f32, rows));
  EXPECT_EQ(gc::encode(s, {}, gc::view(m, rows), buf, ref_opt).error().code(),
            status_code::workspace_too_small);
  EXPECT_EQ(gc::workspace_size(s, gc::view(m, rows), gc::operation::decode, ref_opt).value(), 0u);
  // Too small an output: nothing past it is touched.
  std::vector<std::byte> ws(need.value());
  gc::exec_options opt = ref_opt;
  opt.workspace = ws;
  std::vector<std::byte> small(buf.size() - 16);
  EXPECT_EQ(gc::encode(s, {}, gc::view(m, rows), small, opt).error().code(),
            status_code::output_too_small);
  // A rank above the shape is rejected by the header check before decoding.
  auto frame = encode_ok(s, {}, gc::view(m, rows));
  gc::frame_header h = gc::peek(frame).value();
  h.group = 65;
  gc::write_header(h, frame.data());
  std::vector<float> out(m.size(), 1.0f);
  EXPECT_EQ(gc::decode(frame, gc::view(out), ref_opt).code(), status_code::corrupt_frame);
  for (float x : out) ASSERT_EQ(x, 1.0f);
}

// --- state checkpoints ----------------------------------------------------------------

TEST(PowerSgdState, SaveLoadRoundTrip) {
  const gc::powersgd_state_info info{12, 10, 3, 77};
  const auto q = uniform(10 * 3, 1), res = uniform(12 * 10, 2);
  const std::uint64_t bytes = gc::powersgd_state_bytes(12, 10, 3);
  EXPECT_EQ(bytes, 48u + 128u + 480u + 4u);
  std::vector<std::byte> buf(bytes + 8, std::byte{0x5A});
  auto n = gc::powersgd_save_state(info, q, res, buf);
  ASSERT_TRUE(n.ok()) << n.error().message();
  EXPECT_EQ(n.value(), bytes);
  EXPECT_EQ(buf[bytes], std::byte{0x5A}) << "nothing past the state is written";
  buf.resize(bytes);
  auto peeked = gc::powersgd_peek_state(buf);
  ASSERT_TRUE(peeked.ok()) << peeked.error().message();
  EXPECT_EQ(peeked.value(), info);
  std::vector<float> q2(q.size()), res2(res.size());
  auto loaded = gc::powersgd_load_state(buf, 12, 10, 3, q2, res2);
  ASSERT_TRUE(loaded.ok()) << loaded.error().message();
  EXPECT_EQ(loaded.value().step, 77u);
  EXPECT_TRUE(same_bits(q, q2));
  EXPECT_TRUE(same_bits(res, res2));
  EXPECT_EQ(gc::powersgd_state_bytes(0, 10, 1), 0u);
  EXPECT_EQ(gc::powersgd_state_bytes(5, 10, 6), 0u);
}

// A checkpoint resumes training bit for bit.
TEST(PowerSgdState, ResumedStateContinuesIdentically) {
  const std::uint64_t rows = 20, cols = 18;
  const auto s = psgd(2);
  rank_state a(s, {4, 0, 4}, rows, cols);
  single_step(s, a, uniform(rows * cols, 60), true);
  std::vector<std::byte> buf(gc::powersgd_state_bytes(rows, cols, a.r));
  ASSERT_TRUE(gc::powersgd_save_state({rows, cols, a.r, 1}, a.q, a.residual, buf).ok());
  rank_state b(s, {999, 0, 0}, rows, cols);
  ASSERT_TRUE(gc::powersgd_load_state(buf, rows, cols, b.r, b.q, b.residual).ok());
  const auto g = uniform(rows * cols, 61);
  single_step(s, a, g, true);
  single_step(s, b, g, true);
  EXPECT_TRUE(same_bits(a.out, b.out));
  EXPECT_TRUE(same_bits(a.residual, b.residual));
}

TEST(PowerSgdState, CorruptTruncatedOrMismatchedStatesAreRejected) {
  const gc::powersgd_state_info info{6, 5, 2, 3};
  const auto q = uniform(5 * 2, 1), res = uniform(6 * 5, 2);
  std::vector<std::byte> buf(gc::powersgd_state_bytes(6, 5, 2));
  ASSERT_TRUE(gc::powersgd_save_state(info, q, res, buf).ok());
  std::vector<float> q2(q.size(), 3.0f), res2(res.size(), 3.0f);
  auto untouched = [&] {
    for (float x : q2)
      if (x != 3.0f) return false;
    for (float x : res2)
      if (x != 3.0f) return false;
    return true;
  };
  for (std::size_t bit = 0; bit < buf.size() * 8; ++bit) {
    auto bad = buf;
    bad[bit / 8] ^= static_cast<std::byte>(1u << (bit % 8));
    auto st = gc::powersgd_load_state(bad, 6, 5, 2, q2, res2);
    ASSERT_FALSE(st.ok()) << "bit " << bit;
    ASSERT_TRUE(st.error().code() == status_code::corrupt_frame ||
                st.error().code() == status_code::unsupported_version)
        << "bit " << bit << ": " << st.error().message();
  }
  for (std::size_t len = 0; len < buf.size(); ++len)
    ASSERT_EQ(gc::powersgd_load_state(std::span(buf).first(len), 6, 5, 2, q2, res2).error().code(),
              status_code::corrupt_frame)
        << "length " << len;
  auto longer = buf;
  longer.push_back(std::byte{0});
  EXPECT_EQ(gc::powersgd_load_state(longer, 6, 5, 2, q2, res2).error().code(),
            status_code::corrupt_frame);
  EXPECT_EQ(gc::powersgd_load_state(buf, 5, 6, 2, q2, res2).error().code(),
            status_code::shape_mismatch);
  EXPECT_EQ(gc::powersgd_load_state(buf, 6, 5, 1, q2, res2).error().code(),
            status_code::shape_mismatch);
  std::vector<float> q_short(q.size() - 1, 3.0f), res_long(res.size() + 1, 3.0f);
  EXPECT_EQ(gc::powersgd_load_state(buf, 6, 5, 2, q_short, res2).error().code(),
            status_code::shape_mismatch);
  EXPECT_EQ(gc::powersgd_load_state(buf, 6, 5, 2, q2, res_long).error().code(),
            status_code::shape_mismatch);
  EXPECT_TRUE(untouched());
  for (float x : q_short) EXPECT_EQ(x, 3.0f);
  // Saving checks its inputs too, and writes nothing on error.
  std::vector<std::byte> out(buf.size(), std::byte{0x11});
  EXPECT_EQ(gc::powersgd_save_state(info, q_short, res, out).error().code(),
            status_code::shape_mismatch);
  EXPECT_EQ(gc::powersgd_save_state({6, 5, 7, 0}, q, res, out).error().code(),
            status_code::invalid_argument);
  std::vector<std::byte> small(buf.size() - 1, std::byte{0x11});
  EXPECT_EQ(gc::powersgd_save_state(info, q, res, small).error().code(),
            status_code::output_too_small);
  for (auto b : out) ASSERT_EQ(b, std::byte{0x11});
  for (auto b : small) ASSERT_EQ(b, std::byte{0x11});
}
