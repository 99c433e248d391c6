// SPDX-License-Identifier: Apache-2.0
// The public building blocks (include/gradcodec/blocks/) are enough for a kernel outside
// the library to write the library's exact frames: tests/support/fused_codec.hpp fuses a
// gradient scaling into the encode of every bucketed codec, writes the header with
// write_header, and must produce the bytes of gradcodec::encode of the scaled values; its
// decode-accumulate must write the bits of gradcodec::decode_accumulate. The same code runs
// on a GPU in tests/cuda/fused_kernel_test.cu.
#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "gradcodec/blocks/bitstream.hpp"
#include "gradcodec/blocks/canonical_sum.hpp"
#include "gradcodec/blocks/radix_select.hpp"
#include "gradcodec/blocks/randomk.hpp"
#include "gradcodec/blocks/sparse.hpp"
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
      gc::blocks::randomk_put_key(rng, payload + l.key_offset);
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
      const auto back = gc::blocks::randomk_get_key(payload + l.key_offset);
      EXPECT_EQ(back.key.k0, rng.key.k0);
      EXPECT_EQ(back.key.k1, rng.key.k1);
      EXPECT_EQ(back.step_lo, rng.step_lo);
      EXPECT_EQ(back.tensor_lo, rng.tensor_lo);
    }
}

// The GPU's top-k as a sequential walk: three radix passes over the sparse keys, then the
// compaction rule (key > T, or key == T among the first need_equal), gives the library's
// top-k frame, ties, NaN and Inf included.
TEST(BlocksFused, RadixSelectGivesTheLibraryTopk) {
  for (const char* text : {"topk", "topk:k=1", "topk:ratio=0.3", "topk:k=4097"})
    for (std::size_t n : {1u, 7u, 4097u, 65539u})
      for (bool ties : {false, true}) {
        SCOPED_TRACE(std::string(text) + " n=" + std::to_string(n) + (ties ? " ties" : ""));
        const gc::codec_spec spec = gc::parse_spec(text).value();
        auto v = stress(n, n + 1, true);
        if (ties)
          for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<float>(i % 5) - 2.0f;
        const tensor x(v, gc::dtype::f32);
        const auto expected = encode_vec(spec, {}, x.cview()).value();
        const std::uint64_t k = gc::sparse_count(spec, n);
        gc::blocks::radix_state st;
        st.remaining = k;
        for (int pass = 0; pass < gc::blocks::radix_pass_count; ++pass) {
          std::vector<std::uint32_t> hist(gc::blocks::radix_bins(pass), 0);
          for (std::size_t i = 0; i < n; ++i) {
            const std::uint32_t key = gc::blocks::sparse_key(v[i]);
            if (st.matches(key)) ++hist[gc::blocks::radix_state::bin(key, pass)];
          }
          st.descend(hist.data(), pass);
        }
        const auto l = gc::blocks::sparse_layout_of(k, 4, false);
        std::vector<std::byte> got(gc::header_bytes + l.total, std::byte{0});
        std::byte* payload = got.data() + gc::header_bytes;
        std::uint64_t at = 0, equal_seen = 0;
        bool nonfinite = false;
        for (std::size_t i = 0; i < n; ++i) {
          nonfinite |= !std::isfinite(v[i]);
          const std::uint32_t key = gc::blocks::sparse_key(v[i]);
          const bool equal = key == st.threshold();
          if (!(key > st.threshold() || (equal && equal_seen < st.need_equal()))) continue;
          equal_seen += equal ? 1 : 0;
          const auto idx = static_cast<std::uint32_t>(i);
          std::memcpy(payload + l.values_offset + 4 * at, &v[i], 4);
          std::memcpy(payload + l.index_offset + 4 * at, &idx, 4);
          ++at;
        }
        ASSERT_EQ(at, k);
        gc::frame_header h;
        h.codec = gc::codec_id::topk;
        h.n = n;
        h.count = k;
        h.flags = nonfinite ? gc::flag_nonfinite : 0;
        h.payload_bytes = l.total;
        gc::write_header(h, got.data());
        ASSERT_EQ(got.size(), expected.size());
        ASSERT_EQ(std::memcmp(got.data(), expected.data(), got.size()), 0);
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
