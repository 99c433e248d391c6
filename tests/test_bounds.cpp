// SPDX-License-Identifier: Apache-2.0
// gradcodec::bounds against the codecs themselves: the error bounds hold on random and
// adversarial inputs (per sample for the almost-sure bounds, over seeds for the expected
// ones), error feedback keeps the residual within residual_gain for every codec flagged
// safe, and every codec flagged unsafe really amplifies its error under error feedback.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "gradcodec/bounds.hpp"
#include "support/data.hpp"

namespace gc = gradcodec;

namespace {

gc::codec_spec spec(const std::string& text) {
  auto s = gc::parse_spec(text);
  EXPECT_TRUE(s.ok()) << text << ": " << s.error().message();
  return s.ok() ? s.value() : gc::codec_spec{};
}

bool stochastic(const gc::codec_spec& s) {
  return s.id == gc::codec_id::randomk || s.id == gc::codec_id::terngrad ||
         ((s.id == gc::codec_id::qsgd || s.id == gc::codec_id::minmax) &&
          s.rounding == gc::rounding_mode::stochastic);
}

std::vector<float> roundtrip(const gc::codec_spec& s, const std::vector<float>& x,
                             gc::context ctx) {
  const gc::const_tensor_view in{x.data(), x.size(), gc::dtype::f32,
                                 s.id == gc::codec_id::powersgd ? 16u : 0u};
  auto frame = gc::test::encode_vec(s, ctx, in);
  EXPECT_TRUE(frame.ok()) << gc::to_string(s) << ": " << frame.error().message();
  std::vector<float> out(x.size());
  if (!frame.ok()) return out;
  gc::tensor_view o{out.data(), out.size(), gc::dtype::f32, in.rows};
  EXPECT_TRUE(gc::test::decode_vec(frame.value(), o).ok());
  return out;
}

double sq(const std::vector<float>& a) {
  double s = 0;
  for (float v : a) s += static_cast<double>(v) * v;
  return s;
}

double maxabs(const std::vector<float>& a) {
  double m = 0;
  for (float v : a) m = std::max(m, std::fabs(static_cast<double>(v)));
  return m;
}

std::vector<float> minus(const std::vector<float>& a, const std::vector<float>& b) {
  std::vector<float> d(a.size());
  for (std::size_t i = 0; i < a.size(); ++i) d[i] = a[i] - b[i];
  return d;
}

//! Inputs that reach or approach each codec's worst case, plus random ones.
std::vector<std::vector<float>> inputs(std::size_t n) {
  std::vector<std::vector<float>> out;
  out.push_back(gc::test::gaussian(n, 1));
  auto heavy = gc::test::gaussian(n, 2);
  for (float& v : heavy) v = v * v * v;
  out.push_back(heavy);
  std::vector<float> spike(n, 1e-4f);  // one large value among tiny ones
  spike[n / 2] = 3.0f;
  out.push_back(spike);
  out.push_back(std::vector<float>(n, 0.5f));  // all equal: QSGD's and sign's bad case
  std::vector<float> mid(n, 0.0f);             // zeros between +-M: min-max's bad case
  mid[0] = 1.0f;
  if (n > 1) mid[n - 1] = -1.0f;
  out.push_back(mid);
  std::vector<float> one_zero(n, 2.0f);  // one zero among equal values: the sign codecs'
  one_zero[n / 3] = 0.0f;
  out.push_back(one_zero);
  std::vector<float> quarter(n, 0.25f);  // a max and values a quarter of it: TernGrad's
  for (std::size_t i = 0; i < n; i += 16) quarter[i] = 1.0f;
  out.push_back(quarter);
  return out;
}

const std::vector<std::string> kSpecs = {
    "topk:ratio=0.01",
    "topk:ratio=0.3",
    "dgc:ratio=0.05",
    "randomk:ratio=0.1",
    "randomk:ratio=0.1,unbiased=1",
    "threshold:tau=0.5",
    "threshold:tau=0.5,cap=4",
    "qsgd:norm=l2",
    "qsgd:norm=max",
    "qsgd:levels=3,bucket=64,rounding=nearest",
    "qsgd:levels=127,bucket=64",
    "terngrad:clip=0",
    "terngrad:bucket=16,clip=0",
    "terngrad:clip=2.5",
    "minmax:bits=4",
    "minmax:bits=2,rounding=stochastic",
    "minmax:bits=1",
    "onebit:bucket=128",
    "onebit:bucket=7",
    "sign:scale=mean,bucket=128",
    "sign:scale=l2,bucket=64",
    "sign:scale=none",
    "fp16",
    "bf16",
    "powersgd:rank=2",
};

TEST(Bounds, HoldOnRandomAndAdversarialInputs) {
  for (const auto& text : kSpecs) {
    const auto s = spec(text);
    for (std::size_t n : {1u, 7u, 160u, 1000u, 4099u}) {
      if (s.id == gc::codec_id::powersgd && n % 16 != 0) continue;  // a 16-row matrix
      const auto b = gc::bounds(s, n);
      for (const auto& x : inputs(n)) {
        const double x2 = sq(x), xinf = maxabs(x);
        const int seeds = stochastic(s) ? 64 : 1;
        double mean_rel = 0, mean_sq = 0;
        for (int seed = 0; seed < seeds; ++seed) {
          const auto err = minus(roundtrip(s, x, {static_cast<std::uint64_t>(seed), 1, 3}), x);
          // Almost-sure max-norm bound; f32 scales add a few ulps.
          if (std::isfinite(b.max_relative)) {
            EXPECT_LE(maxabs(err),
                      b.max_relative * xinf * (1 + 1e-5) + b.max_absolute + 1e-6 * xinf)
                << text << " n=" << n << " seed " << seed;
          }
          const double rel = x2 > 0 ? sq(err) / x2 : 0.0;
          mean_rel += rel;
          mean_sq += rel * rel;
        }
        mean_rel /= seeds;
        // The sample mean may exceed the expectation by a few standard errors.
        const double sd = std::sqrt(std::max(0.0, mean_sq / seeds - mean_rel * mean_rel));
        const double noise = 4 * sd / std::sqrt(static_cast<double>(seeds));
        if (std::isfinite(b.variance)) {
          // Deterministic codecs meet the L2 bound on every input; stochastic ones in the
          // mean over the seeds (the bound is a worst case, so the slack is small).
          EXPECT_LE(mean_rel, b.variance * (1 + 1e-5) + noise + 1e-6) << text << " n=" << n;
        }
      }
    }
  }
}

//! Error feedback for `steps` steps on gradients g_t = gen(t): the largest ratios of the
//! residual to what each bound allows at that step (G: the largest gradient so far).
struct feedback_run {
  double worst_inf_excess = 0;  //!< max over steps of ‖e‖∞ / ((κ G∞ + τ)/(1−κ))
  double worst_l2_excess = 0;   //!< max over steps of ‖e‖₂ / (ρ G₂/(1−ρ))
  double max_l2_ratio = 0;      //!< max over steps of ‖e‖₂ / max ‖g‖₂
  bool finite = true;
};

template <class Gen>
feedback_run run_feedback(const gc::codec_spec& s, const gc::codec_bounds& b, std::size_t n,
                          int steps, Gen gen) {
  feedback_run r;
  std::vector<float> e(n, 0.0f);
  double g_inf = 0, g_l2 = 0;
  for (int t = 0; t < steps; ++t) {
    const std::vector<float> g = gen(t);
    g_inf = std::max(g_inf, maxabs(g));
    g_l2 = std::max(g_l2, std::sqrt(sq(g)));
    std::vector<float> p(n);
    for (std::size_t i = 0; i < n; ++i) p[i] = g[i] + e[i];
    e = minus(p, roundtrip(s, p, {7, static_cast<std::uint64_t>(t), 1}));
    for (float v : e)
      if (!std::isfinite(v)) r.finite = false;
    if (!r.finite) return r;
    const double k = b.max_relative, rho = std::sqrt(b.variance);
    if (k < 1) {  // ‖e‖∞ <= (κ G∞ + τ) / (1 − κ)
      const double allowed = (k * g_inf + b.max_absolute) / (1 - k);
      r.worst_inf_excess = std::max(r.worst_inf_excess, maxabs(e) / (allowed * 1.001 + 1e-12));
    }
    r.max_l2_ratio = std::max(r.max_l2_ratio, std::sqrt(sq(e)) / g_l2);
    if (rho < 1)  // ‖e‖₂ <= ρ G₂ / (1 − ρ)
      r.worst_l2_excess =
          std::max(r.worst_l2_excess, std::sqrt(sq(e)) / (rho / (1 - rho) * g_l2 * 1.001 + 1e-12));
  }
  return r;
}

//! Gradient sequences: fresh gaussians, and each input of inputs(n) held fixed.
std::vector<std::function<std::vector<float>(int)>> sequences(std::size_t n, float scale) {
  std::vector<std::function<std::vector<float>(int)>> out;
  out.push_back([n, scale](int t) {
    return gc::test::gaussian(n, 100 + static_cast<std::uint64_t>(t), scale);
  });
  for (auto x : inputs(n)) {
    for (float& v : x) v *= scale;
    out.push_back([x](int) { return x; });
  }
  return out;
}

TEST(Bounds, SafeCodecsKeepTheResidualWithinTheirGain) {
  const std::size_t n = 1024;
  for (const auto& text : kSpecs) {
    const auto s = spec(text);
    const auto b = gc::bounds(s, n);
    if (!b.feedback_safe || !std::isfinite(b.residual_gain)) continue;
    int sequence = 0;
    for (const auto& gen : sequences(n, 1.0f)) {
      const auto r = run_feedback(s, b, n, 200, gen);
      ASSERT_TRUE(r.finite) << text << " sequence " << sequence;
      // The max-norm bound holds almost surely; the L2 one for deterministic codecs.
      if (b.max_relative < 1) {
        EXPECT_LE(r.worst_inf_excess, 1.0) << text << " sequence " << sequence;
      } else if (!stochastic(s)) {
        EXPECT_LE(r.worst_l2_excess, 1.0) << text << " sequence " << sequence;
      }
      ++sequence;
    }
  }
}

TEST(Bounds, UnsafeCodecsAreNoContraction) {
  // A codec flagged unsafe has inputs whose expected squared error is at least the
  // input's own (no L2 contraction), and no max-norm contraction either. QSGD with the
  // L2 norm and unbiased random-k then grow their residual geometrically under error
  // feedback, and unscaled sign leaves it at its unit steps whatever the gradient.
  const std::size_t n = 1024;
  int unsafe = 0;
  for (const auto& text : kSpecs) {
    const auto s = spec(text);
    const auto b = gc::bounds(s, n);
    if (b.feedback_safe) continue;
    ++unsafe;
    EXPECT_GE(b.max_relative, 1.0) << text;
    double worst = 0;
    for (auto x : inputs(n)) {
      for (float& v : x) v *= 1e-3f;
      const int seeds = stochastic(s) ? 64 : 1;
      double rel = 0;
      for (int seed = 0; seed < seeds; ++seed)
        rel += sq(minus(roundtrip(s, x, {static_cast<std::uint64_t>(seed), 2, 1}), x)) / sq(x);
      worst = std::max(worst, rel / seeds);
    }
    EXPECT_GE(worst, 1.0) << text;
  }
  EXPECT_GE(unsafe, 7);
  for (const char* text : {"qsgd:norm=l2", "randomk:ratio=0.1,unbiased=1", "sign:scale=none"}) {
    const auto s = spec(text);
    const auto r = run_feedback(s, gc::bounds(s, n), n, 200, [n](int t) {
      return gc::test::gaussian(n, 100 + static_cast<std::uint64_t>(t), 1e-3f);
    });
    EXPECT_TRUE(!r.finite || r.max_l2_ratio > 100) << text << ": " << r.max_l2_ratio;
  }
}

TEST(Bounds, KnownValues) {
  // QSGD, 7 levels, 512-element buckets: min(512/(4*49), sqrt(512)/7); not a contraction.
  auto q = gc::bounds(spec("qsgd:norm=l2"));
  EXPECT_DOUBLE_EQ(q.variance, 512.0 / 196.0);
  EXPECT_DOUBLE_EQ(q.max_relative, std::sqrt(512.0) / 7);
  EXPECT_TRUE(q.unbiased);
  EXPECT_FALSE(q.feedback_safe);
  auto qm = gc::bounds(spec("qsgd:norm=max"));
  EXPECT_DOUBLE_EQ(qm.max_relative, 1.0 / 7);
  EXPECT_TRUE(qm.feedback_safe);
  // Smaller tensors use smaller groups: QSGD over 16 elements is contractive.
  EXPECT_TRUE(gc::bounds(spec("qsgd:norm=l2"), 16).variance < 1);
  // Top-k keeps k/n of the energy; the onebit residual may reach bucket - 1 gradients.
  EXPECT_DOUBLE_EQ(gc::bounds(spec("topk:ratio=0.01"), 1000).variance, 0.99);
  EXPECT_NEAR(gc::bounds(spec("onebit:bucket=128")).residual_gain, 127, 1e-9);
  EXPECT_NEAR(gc::bounds(spec("minmax:bits=4")).max_relative, 1.0 / 15, 1e-15);
  EXPECT_EQ(gc::bounds(spec("threshold:tau=0.25")).max_absolute, 0.25);
  EXPECT_FALSE(gc::bounds(spec("randomk:unbiased=1")).feedback_safe);
  EXPECT_TRUE(gc::bounds(spec("randomk")).feedback_safe);
  EXPECT_FALSE(gc::bounds(spec("sign:scale=none")).feedback_safe);
  EXPECT_TRUE(gc::bounds(spec("powersgd")).feedback_safe);
  for (const auto& c : gc::all_codecs())
    EXPECT_FALSE(gc::bounds(gc::make_spec(c.id)).reason.empty());
}

}  // namespace
