// SPDX-License-Identifier: Apache-2.0
// CPU kernels of the sign codecs (sign with every scale, onebit) against the reference, on
// every ISA variant this machine runs:
// - adversarial values (NaN/Inf at bucket edges, +-FLT_MAX, subnormals, +-0.0, all-zero,
//   all-negative and constant buckets) with bucket sizes on and off multiples of 16 and
//   of the 256-value chunk, every dtype: identical bytes, decoded and accumulated values;
// - fused error feedback gives the bytes and residual of the reference's generic
//   composition, for dtype pairs, NaN buckets and 1-3 threads;
// - arbitrary payload bytes (NaN scales with bits set, negative NaN, Inf) decode identically;
// - large f32 outputs (the streaming-store path) at every alignment of the output;
// - a one-byte-short buffer is refused without a write.
#include <gtest/gtest.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "gradcodec/cpu.hpp"
#include "support/backend_compare.hpp"
#include "support/data.hpp"

namespace gc = gradcodec;
using namespace gc::test;

namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

//! The context of every plain encode here, and the alpha of every decode-accumulate.
const gc::context kCtx{3, 4, 5};
constexpr float kAlpha = -0.75f;

//! Encoded bytes, decoded and decode-accumulated values (every output dtype) match.
void expect_matches_reference(const std::string& spec_text, const tensor& x, int threads) {
  expect_cpu_matches_reference(spec_text, kCtx, x, threads,
                               {gc::dtype::f32, gc::dtype::f16, gc::dtype::bf16}, kAlpha);
}

// Buckets: 1 and 7 (many buckets per 16-value group), 15/17/33/100 (groups shared between
// buckets), 16/48 (aligned, shorter than a chunk), 2048 (default), 4099 and 70001 (odd chunk
// counts: the pairwise combination carries; 70001 is also one bucket per task).
const char* const kSignSpecs[] = {
    "sign",
    "sign:bucket=1",
    "sign:bucket=7,scale=mean",
    "sign:bucket=15,scale=l2",
    "sign:bucket=16,scale=mean",
    "sign:bucket=17",
    "sign:bucket=33,scale=mean",
    "sign:bucket=48,scale=l2",
    "sign:scale=mean",
    "sign:scale=l2,bucket=4099",
    "sign:scale=mean,bucket=70001",
    "onebit",
    "onebit:bucket=1",
    "onebit:bucket=7",
    "onebit:bucket=16",
    "onebit:bucket=100",
    "onebit:bucket=4099",
    "onebit:bucket=70001",
};

//! Runs of values that stress the formulas: a scale per run from 2^-150 to 2^130, +-0.0,
//! subnormals, +-FLT_MAX, constants, all-negative runs, and plain gaussians.
std::vector<float> adversarial(std::size_t n, std::uint64_t seed) {
  return adversarial_runs(n, seed, 300, [](unsigned kind, float x, lcg& r) {
    switch (kind) {
      case 2: return std::ldexp(static_cast<float>(r.next() % 8), -149) * ((r.next() & 1) ? 1 : -1);
      case 4: return -0.375f;
      default: return -std::fabs(x);  // all-negative run
    }
  });
}

TEST(CpuSign, AdversarialValuesMatchReference) {
  for_each_isa([] {
    for (const char* s : kSignSpecs)
      for (auto type : {gc::dtype::f32, gc::dtype::f16, gc::dtype::bf16})
        for (std::size_t n : {std::size_t{5}, std::size_t{4117}, std::size_t{72001}})
          expect_matches_reference(s, tensor(adversarial(n, n + 3), type), n > 5000 ? 3 : 1);
  });
}

TEST(CpuSign, NonFiniteAtBucketEdgesMatchReference) {
  for_each_isa([] {
    for (const char* s : {"sign:bucket=64", "sign:bucket=40,scale=mean", "sign:bucket=16,scale=l2",
                          "onebit:bucket=64", "onebit:bucket=40", "sign:bucket=1,scale=mean"}) {
      const std::size_t n = 1000;
      auto v = gc::test::gaussian(n, 3);
      // First and last element, both sides of bucket boundaries (64, 40, 16), mid-bucket.
      for (std::size_t at : {0, 63, 64, 80, 119, 120, 500, 999}) v[at] = kNaN;
      v[200] = kInf;
      v[201] = -kInf;
      v[639] = -kInf;
      v[640] = kInf;
      for (auto type : {gc::dtype::f32, gc::dtype::bf16})
        for (int threads : {1, 3}) expect_matches_reference(s, tensor(v, type), threads);
    }
  });
}

TEST(CpuSign, EdgeSizesMatchReference) {
  // Tiny n, n around 16 and 256, bucket larger than n.
  for_each_isa([] {
    for (std::size_t n : {1, 2, 8, 9, 15, 16, 17, 31, 33, 255, 256, 257, 513})
      for (const char* s : {"sign", "sign:scale=mean,bucket=3", "sign:scale=l2,bucket=16",
                            "onebit:bucket=10", "onebit"})
        expect_matches_reference(s, tensor(adversarial(n, n), gc::dtype::f32), 3);
  });
}

TEST(CpuSign, ArbitraryPayloadsDecodeLikeReference) {
  // Any scale and bit pattern is a valid payload: NaN scales of either sign with bits set,
  // +-Inf, subnormals and -0.0 decode (and accumulate) to the reference's values.
  const std::uint32_t special[] = {0x00000000u, 0x80000000u, 0x7F7FFFFFu, 0xFF7FFFFFu,
                                   0x7F800000u, 0xFF800000u, 0x7FC00000u, 0xFFC00000u,
                                   0x7FA00001u, 0x00000001u, 0x80000001u, 0x3F800000u};
  for_each_isa([&] {
    for (const char* s : {"sign:bucket=32", "sign:bucket=5,scale=mean", "onebit:bucket=20",
                          "onebit:bucket=3", "sign:bucket=100,scale=l2"}) {
      SCOPED_TRACE(s);
      const std::size_t n = 777;
      const auto spec = gc::parse_spec(s).value();
      auto frame = encode_on(spec, kCtx, tensor(gc::test::gaussian(n, 1), gc::dtype::f32).cview(),
                             gc::backend::reference);
      scramble_payload(frame, special);
      for (auto type : {gc::dtype::f32, gc::dtype::bf16}) {
        const tensor acc(gc::test::gaussian(n, 2), type);
        for (int threads : {1, 3})
          EXPECT_EQ(cpu_decode_difference(frame, acc, kAlpha, threads), "")
              << gc::dtype_name(type) << " threads=" << threads;
      }
    }
  });
}

TEST(CpuSign, LargeOutputsAtEveryAlignmentMatchReference) {
  // 2^22 + 37 f32 values (16 MiB + 148 bytes) take the streaming-store path; the output
  // starts 0..60 bytes past a 64-byte boundary, so each bucket has a head, whole lines and
  // a tail, for aligned and unaligned bucket sizes.
  const std::size_t n = (std::size_t{1} << 22) + 37;
  const tensor x(gc::test::gaussian(n, 8), gc::dtype::f32);
  for (const char* s : {"sign:scale=mean", "onebit:bucket=100"}) {
    SCOPED_TRACE(s);
    const auto spec = gc::parse_spec(s).value();
    const auto frame = encode_on(spec, kCtx, x.cview(), gc::backend::reference);
    const auto want =
        decode_on(frame, tensor::zeros(n, gc::dtype::f32), false, kAlpha, gc::backend::reference);
    for_each_isa([&] {
      std::vector<std::byte> storage(n * 4 + 128);
      const auto base = reinterpret_cast<std::uintptr_t>(storage.data());
      for (std::size_t offset : {0, 4, 60}) {
        for (int threads : {1, 3}) {
          SCOPED_TRACE("offset " + std::to_string(offset) + " threads " + std::to_string(threads));
          std::byte* p = storage.data() + (64 - base % 64) % 64 + offset;
          std::memset(storage.data(), 0xA5, storage.size());
          gc::exec_options opt{gc::backend::cpu};
          opt.threads = threads;
          ASSERT_TRUE(gc::decode(frame, gc::tensor_view{p, n, gc::dtype::f32, 0}, opt).ok());
          ASSERT_EQ(std::memcmp(p, want.data(), n * 4), 0);
          // Nothing written around the output.
          for (std::byte* q = storage.data(); q < p; ++q) ASSERT_EQ(*q, std::byte{0xA5});
          for (std::byte* q = p + n * 4; q < storage.data() + storage.size(); ++q)
            ASSERT_EQ(*q, std::byte{0xA5});
        }
      }
    });
  }
}

TEST(CpuSign, FusedErrorFeedbackEqualsGenericComposition) {
  for_each_isa([&] {
    for (const char* s : kSignSpecs) {
      SCOPED_TRACE(s);
      const auto spec = gc::parse_spec(s).value();
      for (const auto& [gt, et] : kFeedbackTypes)
        for (std::size_t n :
             {std::size_t{0}, std::size_t{1}, std::size_t{1000}, std::size_t{20003}}) {
          auto gv = adversarial(n, n + 1);
          auto ev = gc::test::gaussian(n, n + 2, 0.5f);
          if (n > 600) {
            gv[600] = kNaN;  // a non-finite bucket: its residual is NaN
            ev[700] = -kInf;
            gv[900] = FLT_MAX;  // p = g + e overflows to +Inf here
            ev[900] = FLT_MAX;
          }
          expect_cpu_feedback_matches_reference(spec, {1, 2, 3}, tensor(gv, gt), tensor(ev, et));
          if (HasFatalFailure()) return;
        }
    }
  });
}

TEST(CpuSign, OneByteShortIsRefusedWithoutWriting) {
  expect_one_byte_short_refused({"sign", "sign:scale=l2,bucket=7", "onebit:bucket=100"});
}

}  // namespace
