// SPDX-License-Identifier: Apache-2.0
// The public building blocks (include/gradcodec/blocks/) are enough for a kernel outside
// the library to write the library's exact frames: tests/support/fused_codec.hpp fuses a
// gradient scaling into the encode of every bucketed codec, writes the header with
// write_header, and must produce the bytes of gradcodec::encode of the scaled values; its
// decode-accumulate must write the bits of gradcodec::decode_accumulate. The same code runs
// on a GPU in tests/cuda/fused_kernel_test.cu.
#include <gtest/gtest.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "gradcodec/blocks/bitstream.hpp"
#include "gradcodec/blocks/canonical_sum.hpp"
#include "gradcodec/blocks/powersgd.hpp"
#include "gradcodec/blocks/radix_select.hpp"
#include "gradcodec/blocks/randomk.hpp"
#include "gradcodec/blocks/sparse.hpp"
#include "gradcodec/powersgd.hpp"
#include "support/data.hpp"
#include "support/fused_codec.hpp"

namespace gc = gradcodec;
using namespace gc::test;

namespace {

constexpr float kFactor = 0.25f;  // the fused pre-division by 4 ranks
constexpr float kAlpha = 0.75f;

//! The header the library writes for these parameters.
gc::frame_header header_of(const fused::params& p, std::uint64_t n, bool nonfinite) {
  gc::frame_header h;
  h.codec = p.codec;
  h.type = gc::dtype::f32;
  h.n = n;
  h.payload_bytes = fused::layout_of(p, n).total;
  h.group = p.bucket;
  h.flags = nonfinite ? gc::flag_nonfinite : 0;
  switch (p.codec) {
    case gc::codec_id::qsgd:
      h.level = static_cast<std::uint16_t>(p.levels);
      h.mode = static_cast<std::uint8_t>((p.stochastic ? gc::mode_stochastic : 0) |
                                         (p.max_norm ? gc::mode_norm_max : 0));
      break;
    case gc::codec_id::terngrad: h.param = p.clip; break;
    case gc::codec_id::minmax:
      h.level = static_cast<std::uint16_t>(p.bits);
      h.mode = p.stochastic ? gc::mode_stochastic : 0;
      break;
    case gc::codec_id::sign:
      h.mode = static_cast<std::uint8_t>(static_cast<unsigned>(p.scale) << gc::mode_scale_shift);
      break;
    default: break;
  }
  return h;
}

//! A whole frame written by the fused code, one bucket at a time.
std::vector<std::byte> fused_frame(const fused::params& p, const gc::context& ctx,
                                   const tensor& g) {
  const auto l = fused::layout_of(p, g.n);
  std::vector<std::byte> frame(gc::header_bytes + l.total, std::byte{0});
  auto* payload = reinterpret_cast<std::uint8_t*>(frame.data() + gc::header_bytes);
  const auto rng = gc::blocks::counter_rng::make(ctx.seed, ctx.step, ctx.tensor_id);
  const fused::scaled_gradient in{g.bytes.data(), g.type, kFactor};
  bool nonfinite = false;
  for (std::uint64_t b = 0; b < l.buckets; ++b)
    nonfinite |= fused::encode_bucket(p, rng, g.n, in, b, payload);
  gc::write_header(header_of(p, g.n, nonfinite), frame.data());
  return frame;
}

//! Gradient-like values with runs of extremes, zeros, -0.0, subnormals and, when asked,
//! NaN and Inf at bucket edges.
std::vector<float> stress(std::size_t n, std::uint64_t seed, bool nonfinite) {
  auto v = with_extremes(n, seed, 16);
  if (nonfinite && n > 0) {
    v[0] = std::numeric_limits<float>::quiet_NaN();
    v[n - 1] = -std::numeric_limits<float>::infinity();
    if (n > 600) v[600] = std::numeric_limits<float>::infinity();
  }
  return v;
}

const char* const kSpecs[] = {
    "qsgd",
    "qsgd:rounding=nearest",
    "qsgd:norm=max,bucket=17",
    "qsgd:levels=1,bucket=15",
    "qsgd:levels=127,bucket=4101",
    "terngrad",
    "terngrad:clip=2.5",
    "terngrad:bucket=1,clip=1",
    "minmax",
    "minmax:bits=1,bucket=16",
    "minmax:bits=3,bucket=33,rounding=stochastic",
    "minmax:bits=5,bucket=48,rounding=stochastic",
    "minmax:bits=8,bucket=2049",
    "sign",
    "sign:scale=mean,bucket=100",
    "sign:scale=l2,bucket=7",
    "onebit",
    "onebit:bucket=3",
};

}  // namespace

TEST(BlocksFused, EncodeWritesTheLibraryFrame) {
  const gc::context ctx{1234, 77, 5};
  for (const char* text : kSpecs) {
    const gc::codec_spec spec = gc::parse_spec(text).value();
    const fused::params p = fused::params_of(spec);
    for (auto type : {gc::dtype::f32, gc::dtype::f16, gc::dtype::bf16})
      for (std::size_t n : {0u, 1u, 7u, 4097u, 65539u})
        for (bool nonfinite : {false, true}) {
          SCOPED_TRACE(std::string(text) + " n=" + std::to_string(n) + " type=" +
                       std::string(gc::dtype_name(type)) + (nonfinite ? " nonfinite" : ""));
          const tensor g(stress(n, n * 3 + 1, nonfinite), type);
          std::vector<float> scaled(n);
          for (std::size_t i = 0; i < n; ++i) scaled[i] = g.get(i) * kFactor;
          const tensor x(scaled, gc::dtype::f32);
          const auto expected = encode_vec(spec, ctx, x.cview()).value();
          const auto got = fused_frame(p, ctx, g);
          ASSERT_EQ(got.size(), expected.size());
          ASSERT_TRUE(std::memcmp(got.data(), expected.data(), got.size()) == 0);
        }
  }
}

TEST(BlocksFused, DecodeAccumulateWritesTheLibraryValues) {
  const gc::context ctx{99, 3, 0};
  for (const char* text : kSpecs) {
    const gc::codec_spec spec = gc::parse_spec(text).value();
    const fused::params p = fused::params_of(spec);
    for (std::size_t n : {1u, 7u, 4097u, 65539u}) {
      SCOPED_TRACE(std::string(text) + " n=" + std::to_string(n));
      const tensor x(stress(n, n + 11, true), gc::dtype::f32);
      const auto frame = encode_vec(spec, ctx, x.cview()).value();
      auto acc0 = gaussian(n, n + 5);
      acc0[n / 2] = std::numeric_limits<float>::quiet_NaN();
      tensor expected(acc0, gc::dtype::f32);
      ASSERT_TRUE(decode_vec(frame, expected.mview(), gc::backend::reference, true, kAlpha).ok());
      std::vector<float> got = acc0;
      const auto* payload = reinterpret_cast<const std::uint8_t*>(frame.data() + gc::header_bytes);
      for (std::uint64_t b = 0; b < fused::layout_of(p, n).buckets; ++b)
        fused::decode_accumulate_bucket(p, n, payload, b, kAlpha, got.data());
      for (std::size_t i = 0; i < n; ++i)
        ASSERT_TRUE(same_bits(got[i], expected.get(i))) << "element " << i;
    }
  }
}

TEST(BlocksFused, RandomkStrataWriteTheLibraryFrame) {
  const gc::context ctx{7, 1ull << 33, 12};
  for (const char* text : {"randomk", "randomk:k=5,unbiased=1", "randomk:ratio=0.3,unbiased=1"})
    for (std::size_t n : {1u, 7u, 4097u, 65539u}) {
      SCOPED_TRACE(std::string(text) + " n=" + std::to_string(n));
      const gc::codec_spec spec = gc::parse_spec(text).value();
      const tensor x(stress(n, n, false), gc::dtype::f32);
      const auto expected = encode_vec(spec, ctx, x.cview()).value();
      const std::uint64_t k = gc::sparse_count(spec, n);
      const auto l = gc::blocks::randomk_layout_of(k, 4);
      std::vector<std::byte> got(gc::header_bytes + l.total, std::byte{0});
      auto* payload = reinterpret_cast<std::uint8_t*>(got.data() + gc::header_bytes);
      const auto rng = gc::blocks::counter_rng::make(ctx.seed, ctx.step, ctx.tensor_id);
      gc::blocks::write_rng_key(rng, payload + l.key_offset);
      bool nonfinite = false;
      for (std::uint64_t j = 0; j < k; ++j) {  // any order: strata are independent
        const auto st = gc::blocks::randomk_stratum_of(rng, j, n, k);
        const float v = x.get(st.index);
        nonfinite |= !gc::blocks::is_finite(v);
        const float sent = spec.unbiased ? v * static_cast<float>(st.size) : v;
        std::memcpy(payload + l.values_offset + 4 * j, &sent, 4);
      }
      gc::frame_header h;
      h.codec = gc::codec_id::randomk;
      h.n = n;
      h.count = k;
      h.mode = spec.unbiased ? gc::mode_unbiased : 0;
      h.flags = nonfinite ? gc::flag_nonfinite : 0;
      h.payload_bytes = l.total;
      gc::write_header(h, got.data());
      ASSERT_EQ(got.size(), expected.size());
      ASSERT_EQ(std::memcmp(got.data(), expected.data(), got.size()), 0);
      const auto back = gc::blocks::read_rng_key(payload + l.key_offset);
      EXPECT_EQ(back.key.k0, rng.key.k0);
      EXPECT_EQ(back.key.k1, rng.key.k1);
      EXPECT_EQ(back.step_lo, rng.step_lo);
      EXPECT_EQ(back.tensor_lo, rng.tensor_lo);
    }
}

// The GPU's selection (kernels/select.cu) as a sequential walk over the same blocks: the
// radix passes over the participants' keys (unless the rule is final), then the
// compaction rule (key > T, or key == T among the first need_equal), in index order.
//! The rule after the radix passes over v (unchanged when the rule says skip).
gc::blocks::select_rule radix_sequential(gc::blocks::select_rule rule,
                                         const std::vector<float>& v) {
  if (rule.skip == 0)
    for (int pass = 0; pass < gc::blocks::radix_pass_count; ++pass) {
      std::vector<std::uint32_t> hist(gc::blocks::radix_bins(pass), 0);
      for (const float x : v) {
        std::uint32_t key = 0;
        if (rule.key_of(x, key) && rule.state.matches(key))
          ++hist[gc::blocks::radix_state::bin(key, pass)];
      }
      rule.state.descend(hist.data(), pass);
    }
  return rule;
}

std::vector<std::uint32_t> select_sequential(gc::blocks::select_rule rule,
                                             const std::vector<float>& v) {
  rule = radix_sequential(rule, v);
  std::vector<std::uint32_t> picked;
  std::uint64_t equal_seen = 0;
  for (std::size_t i = 0; i < v.size(); ++i) {
    std::uint32_t key = 0;
    if (!rule.key_of(v[i], key)) continue;
    const bool equal = key == rule.state.threshold();
    if (key > rule.state.threshold() || (equal && equal_seen++ < rule.state.need_equal()))
      picked.push_back(static_cast<std::uint32_t>(i));
  }
  return picked;
}

//! A sparse frame (f32 values, u32 indices) of the picked elements.
std::vector<std::byte> sparse_frame(gc::codec_id id, const std::vector<float>& v,
                                    const std::vector<std::uint32_t>& picked, float param) {
  const auto l = gc::blocks::sparse_layout_of(picked.size(), 4, false);
  std::vector<std::byte> frame(gc::header_bytes + l.total, std::byte{0});
  std::byte* payload = frame.data() + gc::header_bytes;
  for (std::size_t j = 0; j < picked.size(); ++j) {
    std::memcpy(payload + l.values_offset + 4 * j, &v[picked[j]], 4);
    std::memcpy(payload + l.index_offset + 4 * j, &picked[j], 4);
  }
  gc::frame_header h;
  h.codec = id;
  h.n = v.size();
  h.count = picked.size();
  h.param = param;
  for (const float x : v)
    if (!std::isfinite(x)) h.flags = gc::flag_nonfinite;
  h.payload_bytes = l.total;
  gc::write_header(h, frame.data());
  return frame;
}

std::vector<float> select_data(std::size_t n, int kind) {
  auto v = stress(n, n + 1, true);
  if (kind == 1)
    for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<float>(i % 5) - 2.0f;  // ties
  if (kind == 2)  // large values only where a strided sample looks, tiny elsewhere
    for (std::size_t i = 0; i < n; ++i)
      v[i] = i % 100 == 0 ? 100.0f : 1e-6f * static_cast<float>(i % 7);
  return v;
}

TEST(BlocksFused, RadixSelectGivesTheLibraryTopkAndThreshold) {
  for (std::size_t n : {1u, 7u, 4097u, 65539u})
    for (int kind : {0, 1, 2}) {
      SCOPED_TRACE("n=" + std::to_string(n) + " kind=" + std::to_string(kind));
      const auto v = select_data(n, kind);
      const tensor x(v, gc::dtype::f32);
      for (const char* text : {"topk", "topk:k=1", "topk:ratio=0.3", "topk:k=4097"}) {
        const gc::codec_spec spec = gc::parse_spec(text).value();
        gc::blocks::select_rule rule;
        rule.state.remaining = gc::sparse_count(spec, n);
        const auto got = sparse_frame(gc::codec_id::topk, v, select_sequential(rule, v), 0.0f);
        ASSERT_EQ(got, encode_vec(spec, {}, x.cview()).value()) << text;
      }
      for (const char* text : {"threshold:tau=0.5", "threshold:tau=0.5,cap=3", "threshold:tau=0",
                               "threshold:tau=0,cap=100"}) {
        const gc::codec_spec spec = gc::parse_spec(text).value();
        gc::blocks::select_rule rule;
        rule.tau = spec.tau;
        std::uint64_t candidates = 0;
        for (const float y : v) candidates += rule.candidate(y) ? 1 : 0;
        const bool capped = spec.cap > 0 && candidates > spec.cap;
        rule.state.remaining = capped ? spec.cap : candidates;
        rule.skip = capped ? 0 : 1;  // uncapped: T = 0, need = every candidate
        const auto picked =
            rule.state.remaining > 0 ? select_sequential(rule, v) : std::vector<std::uint32_t>{};
        const auto got = sparse_frame(gc::codec_id::threshold, v, picked, spec.tau);
        ASSERT_EQ(got, encode_vec(spec, {}, x.cview()).value()) << text;
      }
    }
}

// DGC as kernels/dgc.cu runs it: the sample's ks-th largest key by the radix select, the
// candidate counts of four rounds, then either the top k of the first round's candidates
// or the binary fallback rule. Kind 2 data sends the sample threshold far above the
// tensor's k-th largest, so the fallback is exercised too.
TEST(BlocksFused, DgcRoundsAndFallbackGiveTheLibraryFrame) {
  const gc::context ctx{5, 6, 7};
  bool fallback_seen = false;
  for (std::size_t n : {1u, 7u, 4097u, 65539u})
    for (int kind : {0, 1, 2})
      for (const char* text : {"dgc", "dgc:ratio=0.01,sample=0.05", "dgc:k=50,sample=0.01"}) {
        SCOPED_TRACE(std::string(text) + " n=" + std::to_string(n) +
                     " kind=" + std::to_string(kind));
        const gc::codec_spec spec = gc::parse_spec(text).value();
        const auto v = select_data(n, kind);
        const std::uint64_t k = gc::sparse_count(spec, n);
        const std::uint64_t s = std::min<std::uint64_t>(
            std::max<std::uint64_t>(
                1, static_cast<std::uint64_t>(std::ceil(spec.sample * static_cast<double>(n)))),
            n);
        const std::uint64_t stride = n / s;
        const auto rng = gc::blocks::counter_rng::make(ctx.seed, ctx.step, ctx.tensor_id);
        const std::uint64_t start =
            gc::blocks::scale_u32(rng.at(gc::blocks::rng_stream::sampling, 0), stride);
        std::vector<float> sample(s);
        for (std::uint64_t j = 0; j < s; ++j) {
          const float y = v[start + j * stride];
          sample[j] = std::isfinite(y) ? std::fabs(y) : 0.0f;
        }
        const std::uint64_t ks = std::max<std::uint64_t>(1, (k * s + n - 1) / n);
        gc::blocks::select_rule sample_rule;
        sample_rule.state.remaining = ks;
        ASSERT_EQ(select_sequential(sample_rule, sample).size(), ks);
        const gc::blocks::select_rule fixed = radix_sequential(sample_rule, sample);
        float t = gc::blocks::bits_float(fixed.state.threshold());
        gc::blocks::select_rule rule;
        bool found = false;
        for (int r = 0; r < 4 && !found; ++r) {
          if (r > 0) t = t * 0.5f;
          rule = {};
          rule.tau = t;
          std::uint64_t m = 0;
          for (const float y : v) m += rule.candidate(y) ? 1 : 0;
          if (m >= k) {
            rule.state.remaining = k;
            found = true;
          } else if (r == 3) {
            rule.binary = 1;
            rule.skip = 1;
            rule.state.remaining = k - m;
          }
        }
        fallback_seen |= !found;
        const auto got = sparse_frame(gc::codec_id::dgc, v, select_sequential(rule, v),
                                      static_cast<float>(spec.sample));
        ASSERT_EQ(got, encode_vec(spec, ctx, tensor(v, gc::dtype::f32).cview()).value());
      }
  EXPECT_TRUE(fallback_seen) << "no case reached the fallback";
}

// PowerSGD's stateless codec from the blocks: the initial Q (entries, then orth), P = M Q0,
// orth(P), Q = M^T P-hat, and the decode's P Q^T give the library's Q0, frame and values.
TEST(BlocksFused, PowersgdFromTheBlocksMatchesTheLibrary) {
  const gc::context ctx{11, 4, 2};
  struct shape {
    std::uint64_t rows, cols;
    const char* spec;
  };
  for (const shape sh : {shape{64, 48, "powersgd:rank=4"}, shape{7, 300, "powersgd:rank=2"},
                         shape{300, 41, "powersgd:rank=8,eps=0"}, shape{33, 33, "powersgd:rank=1"}})
    for (int kind : {0, 1}) {
      SCOPED_TRACE(std::string(sh.spec) + " " + std::to_string(sh.rows) + "x" +
                   std::to_string(sh.cols) + " kind=" + std::to_string(kind));
      const gc::codec_spec spec = gc::parse_spec(sh.spec).value();
      const std::uint64_t rows = sh.rows, cols = sh.cols, n = rows * cols;
      ASSERT_TRUE(gc::powersgd_compresses(spec, rows, cols));
      const std::uint32_t r = gc::powersgd_rank(spec, rows, cols);
      auto v = gaussian(n, n + 3);
      if (kind == 1) v[n / 2] = std::numeric_limits<float>::quiet_NaN();
      const tensor x(v, gc::dtype::f32, rows);

      std::vector<float> q0(cols * r), q_lib(cols * r);
      const auto rng = gc::blocks::counter_rng::make(ctx.seed, 0, ctx.tensor_id);
      for (std::uint64_t e = 0; e < cols * r; ++e) q0[e] = gc::blocks::powersgd_init_entry(rng, e);
      gc::blocks::powersgd_orthogonalize(q0.data(), cols, r, spec.eps);
      ASSERT_TRUE(gc::powersgd_init_q(spec, ctx, rows, cols, q_lib).ok());
      ASSERT_EQ(std::memcmp(q0.data(), q_lib.data(), q0.size() * 4), 0) << "initial Q";

      const auto m = [&](std::uint64_t i, std::uint64_t j) { return v[i * cols + j]; };
      std::vector<float> p(rows * r), q(cols * r);
      for (std::uint64_t i = 0; i < rows; ++i)
        for (std::uint32_t c = 0; c < r; ++c)
          p[i * r + c] = gc::blocks::powersgd_p_entry(m, q0.data(), i, cols, r, c);
      gc::blocks::powersgd_orthogonalize(p.data(), rows, r, spec.eps);
      for (std::uint64_t j = 0; j < cols; ++j)
        for (std::uint32_t c = 0; c < r; ++c)
          q[j * r + c] = gc::blocks::powersgd_q_entry(m, p.data(), j, rows, r, c);
      const auto l = gc::blocks::powersgd_layout_of(rows, cols, r);
      std::vector<std::byte> got(gc::header_bytes + l.total, std::byte{0});
      std::memcpy(got.data() + gc::header_bytes + l.p_offset, p.data(), l.p_bytes);
      std::memcpy(got.data() + gc::header_bytes + l.q_offset, q.data(), l.q_bytes);
      gc::frame_header h;
      h.codec = gc::codec_id::powersgd;
      h.n = n;
      h.count = rows;
      h.group = r;
      h.param = spec.eps;
      h.flags = kind == 1 ? gc::flag_nonfinite : 0;
      h.payload_bytes = l.total;
      gc::write_header(h, got.data());
      const auto want = encode_vec(spec, ctx, x.cview()).value();
      ASSERT_EQ(got, want);

      tensor decoded = tensor::zeros(n, gc::dtype::f32, rows);
      ASSERT_TRUE(decode_vec(want, decoded.mview()).ok());
      for (std::uint64_t i = 0; i < rows; ++i)
        for (std::uint64_t j = 0; j < cols; ++j)
          ASSERT_TRUE(
              same_bits(as_decoded(gc::blocks::powersgd_out_entry(p.data(), q.data(), i, j, r)),
                        decoded.get(i * cols + j)));
    }
}

TEST(BlocksFused, Pack32EqualsPutCode) {
  for (std::uint32_t bits = 1; bits <= 8; ++bits) {
    std::uint32_t codes[32];
    for (int k = 0; k < 32; ++k)
      codes[k] = (static_cast<std::uint32_t>(k) * 2654435761u >> 7) & ((1u << bits) - 1u);
    std::uint8_t stream[64 * 4] = {};
    for (int k = 0; k < 32; ++k) gc::blocks::put_code(stream, 32 + k, bits, codes[k]);  // group 1
    std::uint32_t words[8] = {};
    gc::blocks::pack32(codes, bits, words);
    EXPECT_EQ(std::memcmp(words, stream + 4 * bits, 4 * bits), 0) << bits << " bits";
    for (int k = 0; k < 32; ++k) {
      EXPECT_EQ(gc::blocks::unpack32(words, bits, k), codes[k]);
      EXPECT_EQ(gc::blocks::get_code(stream, 32 + static_cast<std::uint64_t>(k), bits), codes[k]);
    }
  }
}

TEST(BlocksFused, CanonicalSumOrderIsTheDocumentedOne) {
  // 1 + 2^24 + (-2^24) depends on the order; the chunk lanes and the pairwise combination
  // fix it. Chunk 0: lane 0 holds 2^24 + 1 = 2^24 (rounded), lane 1 holds -2^24 -> 0.
  std::vector<float> t(600, 0.0f);
  t[0] = 0x1p24f;
  t[16] = 1.0f;
  t[1] = -0x1p24f;
  t[300] = 3.0f;  // chunk 1
  t[599] = 0.5f;  // chunk 2 (partial)
  const float s = gc::blocks::canonical_sum(t.size(), [&](std::uint64_t j) { return t[j]; });
  EXPECT_EQ(s, 3.5f);
  EXPECT_TRUE(same_bits(gc::blocks::canonical_sum(0, [](std::uint64_t) { return 1.0f; }), 0.0f));
}

// The order blocks/warp.cuh's block_canonical_sum reduces in, written out on the host: W
// warps take rounds of 2W chunks; a complete round's pair sums fold as a tree (left + right)
// and join the pairwise sum at height log2(2W); the last round joins pair by pair. It must
// give the canonical sum's bits for every length and W, on data whose sums depend on order.
float block_order_sum(const std::vector<float>& t, unsigned warps) {
  auto term = [&](std::uint64_t j) { return t[j]; };
  auto chunk = [&](std::uint64_t c) {
    return gc::blocks::chunk_sum(c * gc::blocks::sum_chunk, t.size(), term);
  };
  const std::uint64_t chunks = (t.size() + gc::blocks::sum_chunk - 1) / gc::blocks::sum_chunk;
  int height = 1;
  while ((1u << height) < 2u * warps) ++height;
  gc::blocks::pairwise_sum sum;
  for (std::uint64_t c0 = 0; c0 < chunks; c0 += 2u * warps) {
    if (c0 + 2u * warps <= chunks) {
      std::vector<float> pair(warps);
      for (unsigned w = 0; w < warps; ++w)
        pair[w] = gc::blocks::fadd(chunk(c0 + 2 * w), chunk(c0 + 2 * w + 1));
      for (unsigned off = 1; off < warps; off *= 2)
        for (unsigned lane = 0; lane + off < warps; lane += 2 * off)
          pair[lane] = gc::blocks::fadd(pair[lane], pair[lane + off]);
      sum.push(pair[0], height);
    } else {
      for (std::uint64_t k = c0; k < chunks; k += 2)
        sum.push(k + 1 < chunks ? gc::blocks::fadd(chunk(k), chunk(k + 1)) : chunk(k),
                 k + 1 < chunks ? 1 : 0);
    }
  }
  return sum.total();
}

TEST(BlocksFused, BlockSplitCanonicalSumKeepsTheBits) {
  // Values over 40 binades: almost every reordering of their sum changes its bits.
  std::vector<float> t = gaussian(70000, 2718);
  for (std::size_t j = 0; j < t.size(); ++j)
    t[j] = std::ldexp(t[j], static_cast<int>(j * 7919 % 41) - 20);
  for (unsigned warps : {1u, 2u, 4u, 8u, 16u, 32u})
    // Lengths around the rounds, and one or three rounds then 2W - 1 chunks (where a round
    // joining at the wrong height would merge with the tail).
    for (std::size_t len : {std::size_t{0}, std::size_t{1}, std::size_t{256}, std::size_t{257},
                            std::size_t{512} * warps, std::size_t{512} * warps + 300,
                            std::size_t{256} * (4 * warps - 1) - 10,
                            std::size_t{256} * (8 * warps - 1) - 10, t.size()}) {
      const std::vector<float> part(t.begin(), t.begin() + static_cast<std::ptrdiff_t>(len));
      const float want = gc::blocks::canonical_sum(len, [&](std::uint64_t j) { return part[j]; });
      EXPECT_TRUE(same_bits(block_order_sum(part, warps), want))
          << warps << " warps, " << len << " terms: " << block_order_sum(part, warps) << " vs "
          << want;
    }
}
