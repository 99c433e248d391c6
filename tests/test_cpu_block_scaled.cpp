// SPDX-License-Identifier: Apache-2.0
// CPU kernels of the block-scaled codecs (mxfp8, mxfp6, mxfp4, mxint8, nvfp4, fp8row) against
// the reference, on every ISA variant this machine runs, beyond the all-codec comparison of
// test_cpu_backend:
// - magnitudes across the whole f32 range and frames of random scale and code bytes;
// - fp8 rows whose scales are NaN, Inf, subnormal or near FLT_MAX;
// - the two places where an encode's tasks meet (nvfp4's tensor scale and the non-finite
//   flag) with several threads; scripts/run-tsan runs this file under ThreadSanitizer;
// - rotated blocks holding infinities or NaN.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "gradcodec/blocks/block_scaled.hpp"
#include "gradcodec/cpu.hpp"
#include "support/backend_compare.hpp"
#include "support/data.hpp"

namespace gc = gradcodec;
using namespace gc::test;

namespace {

// The CPU's encode and error-feedback encode on every ISA, at each thread count, against
// the reference's, which runs once; returns the reference frame.
std::vector<std::byte> expect_encodes_match_reference(const gc::codec_spec& spec,
                                                      const gc::context& ctx, const tensor& x,
                                                      const tensor& e0,
                                                      std::initializer_list<int> thread_counts) {
  auto want = encode_on(spec, ctx, x.cview(), gc::backend::reference);
  const auto want_feedback = feedback_on(spec, ctx, x, e0, gc::backend::reference);
  for_each_isa([&] {
    for (int threads : thread_counts) {
      ASSERT_EQ(
          first_difference(encode_on(spec, ctx, x.cview(), gc::backend::cpu, threads), want, 1), "")
          << "threads=" << threads;
      ASSERT_EQ(cpu_feedback_difference(want_feedback, spec, ctx, x, e0, threads), "")
          << "error feedback, threads=" << threads;
    }
  });
  return want;
}

// The block-scaled codecs' 16-lane paths on what Gaussian inputs rarely reach: blocks whose
// magnitudes span 2^-149 .. 2^127 (subnormal f32 inputs and element codes, E8M0 scales
// clamped at both ends, nvfp4 block scales underflowing), zeros of both signs; and frames
// whose scales and codes are random bytes (NaN, Inf and -0 codes, NaN and subnormal scales).
TEST(CpuBlockScaled, WideRangeAndRandomFramesMatchTheReference) {
  const char* const specs[] = {"mxfp8",
                               "mxfp8:fmt=e5m2",
                               "mxfp6",
                               "mxfp6:fmt=e2m3",
                               "mxfp4",
                               "mxint8",
                               "nvfp4",
                               "fp8row",
                               "fp8row:fmt=e5m2",
                               "mxfp8:rounding=stochastic",
                               "mxfp4:rotate=1,rounding=stochastic",
                               "nvfp4:rotate=1"};
  const std::uint64_t n = 4096 + 48;
  std::mt19937 gen(5);
  std::uniform_real_distribution<float> unit(0.0f, 1.0f);
  std::vector<float> v(n);
  for (std::uint64_t i = 0; i < n; ++i) {
    const int center = -149 + static_cast<int>((i / 32) * 37 % 277);  // per block of 32
    const int e = std::min(127, center + static_cast<int>(unit(gen) * 12.0f) - 6);
    v[i] = std::ldexp(1.0f + unit(gen), e) * (unit(gen) < 0.5f ? -1.0f : 1.0f);
    if (i % 13 == 0) v[i] = i % 26 == 0 ? 0.0f : -0.0f;
  }
  const gc::context ctx{3, 9, 2};
  for (auto isa : supported_isas()) {
    ASSERT_TRUE(gc::set_cpu_isa(isa).ok());
    SCOPED_TRACE(gc::cpu_isa_name(isa));
    for (const char* text : specs) {
      for (std::uint64_t rows : {std::uint64_t{0}, std::uint64_t{112}}) {  // rows of 37
        expect_cpu_matches_reference(text, ctx, tensor(v, gc::dtype::f32, rows), 2,
                                     {gc::dtype::f32, gc::dtype::bf16}, 0.5f);
        if (HasFatalFailure()) return;
      }
      // The same frame with random scales and codes.
      auto frame = encode_on(gc::parse_spec(text).value(), ctx, tensor(v, gc::dtype::f32).cview(),
                             gc::backend::reference);
      const gc::frame_header h = gc::peek(frame).value();
      const auto rule =
          gc::blocks::block_rule_of(h.codec, static_cast<gc::element_format>(h.level), h.mode);
      const auto l = gc::blocks::layout_of(rule, h.n, h.group);
      for (std::uint64_t b = gc::header_bytes + l.scales_offset; b < frame.size(); ++b)
        frame[b] = static_cast<std::byte>(gen() & 0xFFu);
      EXPECT_EQ(cpu_decode_difference(frame, tensor(gaussian(n, 4), gc::dtype::f32), -0.5f, 2), "")
          << text << " with random scales and codes";
    }
  }
  (void)gc::set_cpu_isa(gc::cpu_isa_best());
}

// fp8 rows whose f32 scales are not finite or near the top of the range: the 16-lane fp8
// decode multiplies by dec * 2^8 (e4m3) and skips the NaN canonicalization only where dec
// is finite, so NaN payloads, infinities times zero codes and dec * 2^8 overflowing must
// still give the reference's bits.
TEST(CpuBlockScaled, NonFiniteAndHugeRowScalesDecodeAsTheReference) {
  const std::uint32_t scale_bits[] = {0x7F800000u, 0xFF800000u, 0x7FA00001u, 0xFFC00000u,
                                      0x7F7FFFFFu, 0x7B800000u, 0x00000001u, 0x80000000u};
  const std::uint64_t row = 64, rows = std::size(scale_bits), n = row * rows;
  const gc::context ctx{3, 9, 2};
  std::mt19937 gen(11);
  for (auto isa : supported_isas()) {
    ASSERT_TRUE(gc::set_cpu_isa(isa).ok());
    SCOPED_TRACE(gc::cpu_isa_name(isa));
    for (const char* text : {"fp8row:block=64", "fp8row:fmt=e5m2,block=64"}) {
      auto frame =
          encode_on(gc::parse_spec(text).value(), ctx,
                    tensor(gaussian(n, 3), gc::dtype::f32).cview(), gc::backend::reference);
      const gc::frame_header h = gc::peek(frame).value();
      const auto rule =
          gc::blocks::block_rule_of(h.codec, static_cast<gc::element_format>(h.level), h.mode);
      const auto l = gc::blocks::layout_of(rule, h.n, h.group);
      ASSERT_EQ(l.blocks, rows);
      std::byte* payload = frame.data() + gc::header_bytes;
      for (std::uint64_t r = 0; r < rows; ++r)
        std::memcpy(payload + l.scales_offset + 4 * r, &scale_bits[r], 4);
      for (std::uint64_t i = 0; i < n; ++i)  // every code, zeros and NaNs among them
        payload[l.codes_offset + i] = static_cast<std::byte>(i % 3 == 0 ? 0 : gen() & 0xFFu);
      EXPECT_EQ(cpu_decode_difference(frame, tensor(gaussian(n, 4), gc::dtype::f32), -0.5f, 2), "")
          << text;
    }
  }
  (void)gc::set_cpu_isa(gc::cpu_isa_best());
}

// Threads meet in a block-scaled encode twice: nvfp4's tensor scale is the largest block
// maximum over every task (an atomic maximum), and any task may find a block that is not
// finite (the frame's flag). The input spans five of the CPU's 2^16-element tasks with its
// largest magnitude in the last one; the second pass puts a NaN in the third. Every thread
// count gives the reference's frame (flag included) and error-feedback residual.
TEST(CpuBlockScaled, TasksShareTheTensorScaleAndTheNonFiniteFlag) {
  const std::uint64_t task = std::uint64_t{1} << 16, n = 5 * task + 37;
  std::vector<float> v = gaussian(n, 21);
  v[n - 100] = -1000.0f;
  const gc::context ctx{4, 2, 6};
  const tensor e0(gaussian(n, 8, 0.25f), gc::dtype::f32);
  for (bool with_nan : {false, true}) {
    if (with_nan) v[2 * task + 3] = std::numeric_limits<float>::quiet_NaN();
    const tensor x(v, gc::dtype::f32);
    for (const char* text :
         {"nvfp4", "nvfp4:rotate=1", "mxfp8", "mxfp4:rotate=1,rounding=stochastic", "fp8row"}) {
      SCOPED_TRACE(std::string(text) + (with_nan ? " with a NaN" : ""));
      const auto want =
          expect_encodes_match_reference(gc::parse_spec(text).value(), ctx, x, e0, {1, 2, 4});
      if (HasFatalFailure()) return;
      ASSERT_EQ((gc::peek(want).value().flags & gc::flag_nonfinite) != 0, with_nan);
    }
  }
}

// Rotated blocks with an infinity or a NaN among their inputs: every rotated value of such a
// block is Inf or NaN, and the runs of sixteen one-piece blocks (mxfp8, nvfp4, fp8row rows
// of 256) take the block's finiteness from its rotated maximum, where the reference checks
// the inputs. One block holds +Inf and -Inf (its rotation is NaN), others one Inf or one
// NaN; long rows (1000, two rotated passes) and blocks of 48 (two pieces) have them too.
TEST(CpuBlockScaled, RotatedBlocksWithInfinitiesOrNaNMatchTheReference) {
  const std::uint64_t n = 8192 + 37;
  std::vector<float> v = gaussian(n, 17);
  const float inf = std::numeric_limits<float>::infinity();
  v[100] = inf;
  v[700] = -inf;
  v[1500] = std::numeric_limits<float>::quiet_NaN();
  v[2100] = inf;
  v[2101] = -inf;
  v[n - 5] = inf;  // the tensor's last, partial block
  const tensor x(v, gc::dtype::f32);
  const tensor e0(gaussian(n, 8, 0.25f), gc::dtype::f32);
  const gc::context ctx{7, 1, 4};
  for (const char* text :
       {"mxfp8:rotate=1", "nvfp4:rotate=1", "mxfp4:rotate=1,rounding=stochastic",
        "fp8row:rotate=1,block=256", "fp8row:rotate=1,block=1000", "mxfp8:rotate=1,block=48"}) {
    SCOPED_TRACE(text);
    const auto want =
        expect_encodes_match_reference(gc::parse_spec(text).value(), ctx, x, e0, {1, 2});
    if (HasFatalFailure()) return;
    ASSERT_NE(gc::peek(want).value().flags & gc::flag_nonfinite, 0u);
    for_each_isa([&] {
      EXPECT_EQ(cpu_decode_difference(want, tensor(gaussian(n, 4), gc::dtype::f32), 0.5f, 2), "");
    });
  }
}

}  // namespace
