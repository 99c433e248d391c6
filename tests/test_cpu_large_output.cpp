// SPDX-License-Identifier: Apache-2.0
// Outputs past the CPU kernels' streaming thresholds, where they write whole cache lines with
// streaming stores instead of plain stores; the other CPU tests stay below those sizes, so
// these are the only tests of those paths. Decoding into f32 outputs of 64 MiB and more:
// the bucketed quantizers' decode streams from registers when the output starts on a
// 64-byte boundary (cpu/kernels/quant-inl.hpp), sign's from any 4-byte aligned output. The
// sparse decode and the casts write staged from 16 MiB of output on, in any dtype
// (cpu/kernels/staged-inl.hpp): each block is built in an L1 buffer and copied out with
// streaming stores, after a head up to the first 64-byte boundary (the scalar variant writes
// in place). Each test compares with the reference on every ISA and thread count, at an
// output on a 64-byte boundary and one element past it, and checks that nothing is written
// past the output.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "gradcodec/cpu.hpp"
#include "support/backend_compare.hpp"
#include "support/data.hpp"

namespace gc = gradcodec;
using namespace gc::test;

namespace {

//! 64 MiB of f32 and a partial last line: past the streaming threshold of both kernels.
constexpr std::size_t kN = (std::size_t{1} << 24) + 37;
constexpr std::size_t kGuard = 64;  //!< poisoned floats after the output
constexpr std::uint32_t kPoison = 0xA5A5A5A5u;

struct free_deleter {
  void operator()(void* p) const { std::free(p); }
};

//! n floats at `offset` floats past a 64-byte boundary, followed by kGuard poisoned floats.
class output_buffer {
 public:
  output_buffer(std::size_t n, std::size_t offset)
      : n_(n),
        offset_(offset),
        mem_(static_cast<float*>(std::aligned_alloc(64, (n + offset + kGuard + 15) / 16 * 64))) {
    std::memset(mem_.get(), 0xA5, (n + offset + kGuard) * 4);
  }
  float* data() { return mem_.get() + offset_; }
  gc::tensor_view view() { return {data(), n_, gc::dtype::f32, 0}; }
  bool guard_untouched() const {
    const float* g = mem_.get() + offset_ + n_;
    for (std::size_t i = 0; i < kGuard; ++i) {
      std::uint32_t bits;
      std::memcpy(&bits, g + i, 4);
      if (bits != kPoison) return false;
    }
    return true;
  }

 private:
  std::size_t n_, offset_;
  std::unique_ptr<float[], free_deleter> mem_;
};

gc::status decode_into(const std::vector<std::byte>& frame, gc::tensor_view out, gc::backend where,
                       int threads) {
  gc::exec_options opt = options(where, threads);
  const gc::codec_spec spec = gc::spec_of(gc::peek(frame).value());
  std::vector<std::byte> ws(gc::workspace_size(spec, out, gc::operation::decode, opt).value());
  opt.workspace = ws;
  return gc::decode(frame, out, opt);
}

TEST(CpuLargeOutput, StreamingDecodeMatchesReference) {
  isa_guard restore;
  auto x = gc::test::gaussian(kN, 17);
  x[3] = std::numeric_limits<float>::quiet_NaN();  // NaN stays visible (canonical)
  x[kN - 2] = -std::numeric_limits<float>::infinity();
  const gc::context ctx{5, 6, 7};
  for (const char* s : {"qsgd:levels=7", "minmax:bits=4", "sign:scale=mean", "topk:ratio=0.01",
                        "threshold:tau=2", "fp16", "bf16"}) {
    const gc::codec_spec spec = gc::parse_spec(s).value();
    const auto frame = encode_on(spec, ctx, gc::view(x), gc::backend::cpu, 2);
    ASSERT_FALSE(frame.empty()) << s;
    output_buffer want(kN, 0);
    ASSERT_TRUE(decode_into(frame, want.view(), gc::backend::reference, 1).ok()) << s;
    for (auto isa : supported_isas()) {
      ASSERT_TRUE(gc::set_cpu_isa(isa).ok());
      for (int threads : {1, 2}) {
        for (std::size_t offset : {std::size_t{0}, std::size_t{1}}) {
          SCOPED_TRACE(std::string(s) + " " + std::string(gc::cpu_isa_name(isa)) +
                       " threads=" + std::to_string(threads) + " offset=" + std::to_string(offset));
          output_buffer got(kN, offset);
          ASSERT_TRUE(decode_into(frame, got.view(), gc::backend::cpu, threads).ok());
          EXPECT_EQ(std::memcmp(got.data(), want.data(), kN * 4), 0);
          EXPECT_TRUE(got.guard_untouched());
        }
      }
    }
  }
}

// f16 and bf16 outputs of kN elements (32 MiB) at 0 or 2 bytes past a 64-byte boundary: the
// staged path without a head and with one (the scalar variant writes in place).
TEST(CpuLargeOutput, StagedDecodeIntoHalfOutputsMatchesReference) {
  isa_guard restore;
  auto x = gc::test::gaussian(kN, 23);
  x[5] = std::numeric_limits<float>::quiet_NaN();
  const gc::context ctx{8, 9, 10};
  for (const char* s : {"topk:ratio=0.01", "threshold:tau=1.5", "fp16", "bf16"}) {
    const gc::codec_spec spec = gc::parse_spec(s).value();
    const auto frame = encode_on(spec, ctx, gc::view(x), gc::backend::cpu, 2);
    ASSERT_FALSE(frame.empty()) << s;
    for (gc::dtype out_type : {gc::dtype::f16, gc::dtype::bf16}) {
      std::vector<std::uint16_t> want(kN);
      ASSERT_TRUE(
          decode_into(frame, {want.data(), kN, out_type, 0}, gc::backend::reference, 1).ok());
      for (auto isa : supported_isas()) {
        ASSERT_TRUE(gc::set_cpu_isa(isa).ok());
        for (int threads : {1, 2}) {
          for (std::size_t offset : {std::size_t{0}, std::size_t{2}}) {
            SCOPED_TRACE(std::string(s) + " " + std::string(gc::dtype_name(out_type)) + " " +
                         std::string(gc::cpu_isa_name(isa)) + " threads=" +
                         std::to_string(threads) + " offset=" + std::to_string(offset));
            // The f32 buffer's memory, used as halves: kN + 1 halves fit in its first half.
            output_buffer mem(kN, 0);
            std::byte* got = reinterpret_cast<std::byte*>(mem.data()) + offset;
            ASSERT_TRUE(decode_into(frame, {got, kN, out_type, 0}, gc::backend::cpu, threads).ok());
            EXPECT_EQ(std::memcmp(got, want.data(), kN * 2), 0);
            std::uint16_t after;
            std::memcpy(&after, got + kN * 2, 2);
            EXPECT_EQ(after, 0xA5A5u);  // the poison just past the output
          }
        }
      }
    }
  }
}

}  // namespace
