// SPDX-License-Identifier: Apache-2.0
// The CPU backend's majority vote (cpu/kernels/vote-inl.hpp) against the scalar oracle of
// src/vote.cpp, byte for byte, on every ISA variant this machine runs and with 1, 2 and 3
// threads: voter counts around every plane count of the bit-sliced counter and past 255
// (counted in blocks), element counts around the 64-element words and the 16-lane groups,
// buckets smaller than, equal to and larger than a word, poisoned (NaN) buckets, every
// output dtype, special alphas, output pointers at every 4-byte offset of a cache line and
// a large f32 output (the streaming-store path). Nothing is written outside the output.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "contract/vote_kernels.hpp"
#include "gradcodec/cpu.hpp"
#include "gradcodec/vote.hpp"
#include "support/backend_compare.hpp"
#include "support/data.hpp"

namespace gc = gradcodec;
using namespace gc::test;

namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

//! `voters` sign frames of n elements in buckets of `bucket`, each from its own gaussian
//! data (so the votes disagree); every `poison_every`-th frame (0: none) gets a NaN at an
//! element chosen by the frame, which makes that bucket NaN in the vote.
std::vector<std::vector<std::byte>> make_frames(std::size_t voters, std::uint64_t n,
                                                std::uint32_t bucket, std::size_t poison_every,
                                                std::uint64_t seed) {
  const auto spec = gc::parse_spec("sign:scale=mean,bucket=" + std::to_string(bucket)).value();
  std::vector<std::vector<std::byte>> frames;
  for (std::size_t v = 0; v < voters; ++v) {
    auto x = gaussian(n, seed + 31 * v);
    if (poison_every > 0 && v % poison_every == 0 && n > 0) x[(v * 7919 + 13) % n] = kNaN;
    std::vector<std::byte> f(gc::encode_bound(spec, n));
    auto written = gc::encode(spec, {1, 2, 3}, gc::view(x), f);
    EXPECT_TRUE(written.ok()) << written.error().message();
    f.resize(written.value());
    frames.push_back(std::move(f));
  }
  return frames;
}

//! A buffer of n elements of dtype t at `offset` bytes past a 64-byte boundary, with 64
//! guard bytes on each side; every byte starts as 0xA5.
struct guarded_output {
  std::vector<std::byte> storage;
  std::size_t start = 0, bytes = 0;
  gc::tensor_view view;
  guarded_output(std::uint64_t n, gc::dtype t, std::size_t offset) {
    bytes = n * gc::dtype_size(t);
    storage.assign(bytes + 256, std::byte{0xA5});
    const auto base = reinterpret_cast<std::uintptr_t>(storage.data());
    start = (base + 64 + 63) / 64 * 64 + offset - base;  // 64 to 127 + offset
    view = {storage.data() + start, n, t};
  }
};

//! The vote of `frames` on the active ISA and thread count equals the scalar oracle's
//! bytes, status and untouched guard bytes.
void expect_matches_oracle(const std::vector<std::vector<std::byte>>& owned, gc::dtype t,
                           float alpha, std::size_t offset, const std::string& what) {
  const std::vector<gc::const_bytes> frames(owned.begin(), owned.end());
  std::uint64_t n = 0;
  if (!owned.empty()) n = gc::peek(frames[0]).value().n;
  guarded_output want(n, t, offset), got(n, t, offset);
  const gc::status ws =
      gc::detail::majority_vote_with(gc::detail::vote_scalar_kernels(), frames, want.view, alpha);
  const gc::status gs = gc::sign_majority_vote(frames, got.view, alpha);
  ASSERT_EQ(ws.code(), gs.code()) << what << ": " << ws.message() << " / " << gs.message();
  // The output and 64 guard bytes on either side.
  for (std::size_t k = 0; k < want.bytes + 128; ++k)
    ASSERT_EQ(want.storage[want.start - 64 + k], got.storage[got.start - 64 + k])
        << what << ": byte " << static_cast<long long>(k) - 64 << " of the output (" << n
        << " elements)";
}

struct vote_case {
  std::size_t voters;
  std::uint64_t n;
  std::uint32_t bucket;
  std::size_t poison_every;
};

class CpuVote : public ::testing::Test {
 protected:
  void TearDown() override {
    (void)gc::set_cpu_isa(gc::cpu_isa_best());
    gc::set_cpu_default_threads(0);
  }
};

TEST_F(CpuVote, MatchesTheScalarOracle) {
  // Voters: 1-8 planes of the counter (1, 2, 3, 4, 7, 8, 15, 16, 17, 255) and blocks of
  // 255 (256, 511, 600). Elements: empty, shorter than a group, around 16 and 64, several
  // tasks (2^20 + 3). Buckets: 1 (a bucket per element), 7, 64, 100, 4097.
  std::vector<vote_case> cases;
  for (std::size_t voters : {1u, 2u, 3u, 4u, 7u, 8u, 15u, 16u, 17u, 255u})
    for (std::uint64_t n : {0u, 1u, 7u, 15u, 16u, 17u, 63u, 64u, 65u, 129u, 4097u})
      for (std::uint32_t bucket : {1u, 7u, 64u, 100u, 4097u})
        cases.push_back({voters, n, bucket, voters % 3 == 0 ? 2u : 0u});
  // Few poisoned frames among many voters: most buckets still vote.
  for (std::size_t voters : {256u, 511u, 600u}) cases.push_back({voters, 3000, 100, 250});
  for (std::size_t voters : {3u, 16u}) cases.push_back({voters, (1u << 20) + 3, 512, 7});
  for (const vote_case& vc : cases) {
    const auto frames = make_frames(vc.voters, vc.n, vc.bucket, vc.poison_every, vc.n + vc.voters);
    for_each_isa([&] {
      for (int threads : {1, 2, 3}) {
        gc::set_cpu_default_threads(threads);
        for (gc::dtype t : {gc::dtype::f32, gc::dtype::f16, gc::dtype::bf16}) {
          const std::string what = std::to_string(vc.voters) + " voters, n " +
                                   std::to_string(vc.n) + ", bucket " + std::to_string(vc.bucket) +
                                   ", " + std::string(gc::dtype_name(t)) + ", " +
                                   std::to_string(threads) + " threads";
          expect_matches_oracle(frames, t, 0.25f, 4, what);
          if (HasFatalFailure()) return;
        }
      }
    });
    if (HasFatalFailure()) return;
  }
}

TEST_F(CpuVote, SpecialAlphasAndEveryOutputOffset) {
  const auto frames = make_frames(4, 300, 64, 3, 9);
  for_each_isa([&] {
    for (float alpha : {1.0f, -0.0f, kNaN, -kNaN, kInf, -kInf, 1e-45f, 3.0e38f})
      for (std::size_t offset = 0; offset < 64; offset += 4)
        for (gc::dtype t : {gc::dtype::f32, gc::dtype::f16, gc::dtype::bf16}) {
          if (offset % gc::dtype_size(t) != 0) continue;
          expect_matches_oracle(frames, t, alpha, offset,
                                "alpha " + std::to_string(alpha) + ", offset " +
                                    std::to_string(offset) + ", " + std::string(gc::dtype_name(t)));
          if (HasFatalFailure()) return;
        }
  });
}

TEST_F(CpuVote, LargeF32OutputsAtEveryAlignment) {
  // 2^22 + 5 f32 outputs (16 MiB): 64-byte aligned ones take the streaming-store path.
  const auto frames = make_frames(5, (1u << 22) + 5, 2048, 0, 21);
  for_each_isa([&] {
    for (std::size_t offset : {0u, 4u, 60u}) {
      expect_matches_oracle(frames, gc::dtype::f32, 0.5f, offset,
                            "offset " + std::to_string(offset));
      if (HasFatalFailure()) return;
    }
  });
}

TEST_F(CpuVote, BadFramesAreRefusedWithoutWriting) {
  // The checks run before any kernel: a mismatch in the last frame leaves the output as it
  // was on every ISA.
  auto frames = make_frames(3, 100, 16, 0, 5);
  frames.push_back(make_frames(1, 101, 16, 0, 6)[0]);
  for_each_isa([&] { expect_matches_oracle(frames, gc::dtype::f32, 1.0f, 0, "mismatch"); });
  const std::vector<gc::const_bytes> views(frames.begin(), frames.end());
  guarded_output out(100, gc::dtype::f32, 0);
  EXPECT_EQ(gc::sign_majority_vote(views, out.view).code(), gc::status_code::shape_mismatch);
  for (std::byte b : out.storage) ASSERT_EQ(b, std::byte{0xA5});
}

}  // namespace
