// SPDX-License-Identifier: Apache-2.0
// CPU kernels of the bucketed quantizers (qsgd, terngrad, minmax) and their building blocks,
// on every ISA variant this machine runs:
// - the 16-lane Philox equals counter_rng::at (block-index carries, high words, streams);
// - pack16/unpack16 write and read exactly the LSB-first stream of docs/format.md;
// - fused error feedback gives the bytes and residual of the reference's generic
//   composition, for every dtype pair and 1-3 threads;
// - adversarial values (NaN/Inf at bucket edges, +-FLT_MAX, subnormals, -0.0, constant
//   buckets, rounding ties), odd bucket sizes and every bit width match the reference;
// - large aligned f32 decodes (streaming stores) equal plain-store decodes;
// - arbitrary payload bytes (NaN/Inf/negative scales, codes above 2s) decode identically;
// - a one-byte-short buffer is refused without a write.
#include <gtest/gtest.h>

#include <algorithm>
#include <cfloat>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "cpu/common.hpp"
#include "gradcodec/cpu.hpp"
#include "support/backend_compare.hpp"
#include "support/data.hpp"

#if defined(__GNUC__) && !defined(__clang__)
// GCC 12's intrinsic headers trip its own uninitialized-use analysis (see cpu/CMakeLists.txt).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

// The building blocks, compiled once per ISA level exactly as cpu/variant.cpp.in does, with
// a small runtime-width front for the tests.
#define GRADCODEC_QTEST_BODY                                                                 \
  void philox_numbers(const blocks::counter_rng& rng, blocks::rng_stream s, std::uint64_t i, \
                      std::uint32_t* out) {                                                  \
    vstore_u(out, (i & 3u) == 0 ? philox16(philox16_make(rng, s), i)                         \
                                : philox16_any(philox16_make(rng, s), i));                   \
  }                                                                                          \
  template <unsigned B>                                                                      \
  void pack_t(const std::uint32_t* codes, std::byte* dst) {                                  \
    pack16<B>(dst, vload_u(codes));                                                          \
  }                                                                                          \
  template <unsigned B>                                                                      \
  void unpack_t(const std::byte* src, std::uint32_t* codes) {                                \
    vstore_u(codes, unpack16<B>(src));                                                       \
  }                                                                                          \
  using pack_fn = void (*)(const std::uint32_t*, std::byte*);                                \
  using unpack_fn = void (*)(const std::byte*, std::uint32_t*);                              \
  pack_fn packer(unsigned bits) {                                                            \
    const pack_fn f[] = {pack_t<1>, pack_t<2>, pack_t<3>, pack_t<4>,                         \
                         pack_t<5>, pack_t<6>, pack_t<7>, pack_t<8>};                        \
    return f[bits - 1];                                                                      \
  }                                                                                          \
  unpack_fn unpacker(unsigned bits) {                                                        \
    const unpack_fn f[] = {unpack_t<1>, unpack_t<2>, unpack_t<3>, unpack_t<4>,               \
                           unpack_t<5>, unpack_t<6>, unpack_t<7>, unpack_t<8>};              \
    return f[bits - 1];                                                                      \
  }

namespace gradcodec::cpu::qtest_scalar {
#define GRADCODEC_CPU_LEVEL 0
// The SIMD layer first: the kernels are written against it.
#include "cpu/simd-inl.hpp"

#include "cpu/kernels/bitpack-inl.hpp"
#include "cpu/kernels/philox-inl.hpp"
GRADCODEC_QTEST_BODY
#undef GRADCODEC_CPU_LEVEL
}  // namespace gradcodec::cpu::qtest_scalar

GRADCODEC_TARGET_BEGIN(GRADCODEC_TARGET_AVX2)
namespace gradcodec::cpu::qtest_avx2 {
#define GRADCODEC_CPU_LEVEL 1
// The SIMD layer first: the kernels are written against it.
#include "cpu/simd-inl.hpp"

#include "cpu/kernels/bitpack-inl.hpp"
#include "cpu/kernels/philox-inl.hpp"
GRADCODEC_QTEST_BODY
#undef GRADCODEC_CPU_LEVEL
}  // namespace gradcodec::cpu::qtest_avx2
GRADCODEC_TARGET_END

GRADCODEC_TARGET_BEGIN(GRADCODEC_TARGET_AVX512)
namespace gradcodec::cpu::qtest_avx512 {
#define GRADCODEC_CPU_LEVEL 2
// The SIMD layer first: the kernels are written against it.
#include "cpu/simd-inl.hpp"

#include "cpu/kernels/bitpack-inl.hpp"
#include "cpu/kernels/philox-inl.hpp"
GRADCODEC_QTEST_BODY
#undef GRADCODEC_CPU_LEVEL
}  // namespace gradcodec::cpu::qtest_avx512
GRADCODEC_TARGET_END

namespace gc = gradcodec;
using namespace gc::test;

namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

struct level_fns {
  gc::cpu_isa isa;
  void (*philox)(const gc::blocks::counter_rng&, gc::blocks::rng_stream, std::uint64_t,
                 std::uint32_t*);
  void (*(*packer)(unsigned))(const std::uint32_t*, std::byte*);
  void (*(*unpacker)(unsigned))(const std::byte*, std::uint32_t*);
};

std::vector<level_fns> supported_levels() {
  namespace c = gc::cpu;
  const level_fns all[] = {
      {gc::cpu_isa::scalar, c::qtest_scalar::philox_numbers, c::qtest_scalar::packer,
       c::qtest_scalar::unpacker},
      {gc::cpu_isa::avx2, c::qtest_avx2::philox_numbers, c::qtest_avx2::packer,
       c::qtest_avx2::unpacker},
      {gc::cpu_isa::avx512, c::qtest_avx512::philox_numbers, c::qtest_avx512::packer,
       c::qtest_avx512::unpacker},
  };
  std::vector<level_fns> out;
  for (const auto& l : all)
    if (gc::cpu_isa_supported(l.isa)) out.push_back(l);
  return out;
}

TEST(CpuQuantBlocks, PhiloxMatchesCounterRng) {
  const gc::blocks::counter_rng rngs[] = {
      gc::blocks::counter_rng::make(0, 0, 0),
      gc::blocks::counter_rng::make(7, 11, 13),
      gc::blocks::counter_rng::make(0xFEDCBA9876543210ull, 0x123456789ull, 0xABCDEF0123ull),
  };
  // Block indices around 2^32 carry into the counter's second word; 2^46 is past 2^48
  // elements' worth of blocks' high bits used by n <= 2^48.
  const std::uint64_t starts[] = {0,
                                  4,
                                  16,
                                  1000,
                                  (std::uint64_t{1} << 34) - 8,
                                  (std::uint64_t{1} << 34) - 4,
                                  (std::uint64_t{1} << 35) + 44,
                                  (std::uint64_t{1} << 48) - 16,
                                  1,
                                  2,
                                  3,
                                  (std::uint64_t{1} << 34) - 6,
                                  999};
  for (const auto& l : supported_levels()) {
    SCOPED_TRACE(std::string(gc::cpu_isa_name(l.isa)));
    for (const auto& rng : rngs)
      for (auto s : {gc::blocks::rng_stream::rounding, gc::blocks::rng_stream::selection,
                     gc::blocks::rng_stream::init})
        for (std::uint64_t i : starts) {
          std::uint32_t got[16];
          l.philox(rng, s, i, got);
          for (unsigned j = 0; j < 16; ++j) ASSERT_EQ(got[j], rng.at(s, i + j)) << i << "+" << j;
        }
  }
}

TEST(CpuQuantBlocks, PackAndUnpackFollowTheStreamLayout) {
  for (const auto& l : supported_levels()) {
    SCOPED_TRACE(std::string(gc::cpu_isa_name(l.isa)));
    lcg r{5};
    for (unsigned bits = 1; bits <= 8; ++bits) {
      for (int trial = 0; trial < 200; ++trial) {
        std::uint32_t codes[16];
        for (auto& c : codes) c = r.next() & ((1u << bits) - 1u);
        if (trial == 0)
          for (auto& c : codes) c = (1u << bits) - 1u;  // all ones
        // Stream bit j of code i*bits+k is bit k of code i (docs/format.md).
        std::byte want[16] = {};
        for (unsigned i = 0; i < 16; ++i)
          for (unsigned k = 0; k < bits; ++k)
            if ((codes[i] >> k) & 1u) {
              const unsigned j = i * bits + k;
              want[j / 8] |= static_cast<std::byte>(1u << (j % 8));
            }
        std::byte got[32];
        std::memset(got, 0xA5, sizeof got);
        l.packer(bits)(codes, got + 8);
        ASSERT_EQ(std::memcmp(got + 8, want, 2 * bits), 0) << bits;
        for (unsigned k = 0; k < 8; ++k) ASSERT_EQ(got[k], std::byte{0xA5});
        for (unsigned k = 8 + 2 * bits; k < 32; ++k) ASSERT_EQ(got[k], std::byte{0xA5}) << bits;
        std::uint32_t back[16];
        l.unpacker(bits)(want, back);
        for (unsigned i = 0; i < 16; ++i) ASSERT_EQ(back[i], codes[i]) << bits << " lane " << i;
      }
    }
  }
}

// ---- codec level ----------------------------------------------------------------------

//! The alpha of every decode-accumulate here.
constexpr float kAlpha = 0.75f;

//! Encode bytes, decode and decode-accumulate (f32, f16 outputs) agree with the reference.
void expect_matches_reference(const std::string& spec_text, const tensor& x, int threads = 2) {
  expect_cpu_matches_reference(spec_text, {99, 5, 1}, x, threads, {gc::dtype::f32, gc::dtype::f16},
                               kAlpha);
}

const char* const kQuantSpecs[] = {
    "qsgd",
    "qsgd:rounding=nearest",
    "qsgd:norm=max,bucket=17",
    "qsgd:levels=1,bucket=15",
    "qsgd:levels=3,bucket=256,rounding=nearest",
    "qsgd:levels=20,bucket=1000,norm=max",
    "qsgd:levels=127,bucket=4101",
    "terngrad",
    "terngrad:clip=2.5",
    "terngrad:bucket=1,clip=1",
    "terngrad:bucket=257,clip=0.5",
    "minmax",
    "minmax:bits=1,bucket=16",
    "minmax:bits=2,bucket=31,rounding=stochastic",
    "minmax:bits=3,bucket=33",
    "minmax:bits=5,bucket=48,rounding=stochastic",
    "minmax:bits=6,bucket=1",
    "minmax:bits=7,bucket=300",
    "minmax:bits=8,bucket=2049,rounding=stochastic",
};

//! Values that stress the formulas: a scale per bucket from 2^-149 to FLT_MAX, exact
//! zeros and -0.0, subnormals, +-FLT_MAX, constant runs, and half-step ties.
std::vector<float> adversarial(std::size_t n, std::uint64_t seed) {
  return adversarial_runs(n, seed, 97, [](unsigned kind, float, lcg& r) {
    switch (kind) {
      case 2: return std::ldexp(static_cast<float>(r.next() % 8), -149);  // subnormal
      case 4: return 0.375f;                                              // constant run
      default: return static_cast<float>(r.next() % 31) * 0.5f;           // ties at .5
    }
  });
}

TEST(CpuQuant, AdversarialValuesMatchReference) {
  for_each_isa([] {
    for (const char* s : kQuantSpecs)
      for (auto type : {gc::dtype::f32, gc::dtype::f16, gc::dtype::bf16})
        for (std::size_t n : {std::size_t{5}, std::size_t{4117}, std::size_t{140001}})
          // The multi-task size (several tasks per thread) in f32 only, for time.
          if (n < 5000 || type == gc::dtype::f32)
            expect_matches_reference(s, tensor(adversarial(n, n + 3), type), n > 5000 ? 3 : 1);
  });
}

TEST(CpuQuant, NonFiniteAtBucketEdgesMatchReference) {
  for_each_isa([] {
    for (const char* s : {"qsgd:bucket=64", "qsgd:bucket=40,norm=max", "terngrad:bucket=64,clip=2",
                          "minmax:bits=3,bucket=40,rounding=stochastic"}) {
      const std::size_t n = 1000;
      auto v = gc::test::gaussian(n, 3);
      // First and last element, both sides of bucket boundaries (64 and 40), mid-bucket.
      for (std::size_t at : {0, 63, 64, 80, 119, 120, 500, 999}) v[at] = kNaN;
      v[200] = kInf;
      v[201] = -kInf;
      v[639] = kInf;
      v[640] = -kInf;
      for (auto type : {gc::dtype::f32, gc::dtype::bf16})
        expect_matches_reference(s, tensor(v, type), 2);
    }
  });
}

TEST(CpuQuant, EveryWidthAndLevelMatchesReference) {
  for_each_isa([] {
    const tensor x(gc::test::gaussian(3001, 9), gc::dtype::f32);
    for (unsigned bits = 1; bits <= 8; ++bits)
      for (const char* r : {"nearest", "stochastic"})
        expect_matches_reference("minmax:bits=" + std::to_string(bits) + ",bucket=96,rounding=" + r,
                                 x);
    for (unsigned s : {1u, 2u, 3u, 4u, 7u, 8u, 15u, 16u, 31u, 32u, 63u, 64u, 100u, 127u})
      for (const char* r : {"nearest", "stochastic"})
        expect_matches_reference(
            "qsgd:levels=" + std::to_string(s) + ",bucket=250,rounding=" + std::string(r), x);
  });
}

TEST(CpuQuant, EdgeSizesMatchReference) {
  // The last group of 16 codes can end past the payload for odd widths (n = 17, 5 bits: 20
  // bytes of group, 16 bytes of codes area); tiny n and bucket > n.
  for_each_isa([] {
    for (std::size_t n : {1, 2, 15, 16, 17, 31, 33, 47, 255, 257})
      for (const char* s :
           {"minmax:bits=5", "minmax:bits=7,bucket=3", "minmax:bits=3,bucket=16",
            "qsgd:levels=15,bucket=10", "qsgd:levels=127,bucket=7", "terngrad:bucket=5"})
        expect_matches_reference(s, tensor(gc::test::gaussian(n, n), gc::dtype::f32), 3);
  });
}

TEST(CpuQuant, ArbitraryPayloadsDecodeLikeReference) {
  // Decoders trust no scale or code: random payload bytes (NaN/Inf/negative/subnormal
  // scales, lo > hi, qsgd codes above 2s) decode to the reference's values.
  const std::uint32_t special[] = {0x00000000u, 0x80000000u, 0x7F7FFFFFu, 0xFF7FFFFFu,
                                   0x7F800000u, 0xFF800000u, 0x7FC00000u, 0x00000001u,
                                   0x80000001u, 0x00800000u, 0x3F800000u, 0xBF800000u};
  for_each_isa([&] {
    for (const char* s :
         {"qsgd:levels=5,bucket=32", "qsgd:levels=1,bucket=20", "qsgd:levels=100",
          "terngrad:bucket=24", "minmax:bits=3,bucket=32", "minmax:bits=8,bucket=17"}) {
      SCOPED_TRACE(s);
      const std::size_t n = 777;
      const auto spec = gc::parse_spec(s).value();
      auto frame =
          encode_on(spec, {1, 2, 3}, tensor(gc::test::gaussian(n, 1), gc::dtype::f32).cview(),
                    gc::backend::reference);
      // Special scale bit patterns in the first buckets (scales start the payload).
      scramble_payload(frame, special);
      const tensor acc(gc::test::gaussian(n, 2), gc::dtype::f32);
      for (int threads : {1, 3})
        EXPECT_EQ(cpu_decode_difference(frame, acc, kAlpha, threads), "") << "threads=" << threads;
    }
  });
}

TEST(CpuQuant, FusedErrorFeedbackEqualsGenericComposition) {
  for_each_isa([&] {
    for (const char* s : kQuantSpecs) {
      SCOPED_TRACE(s);
      const auto spec = gc::parse_spec(s).value();
      for (const auto& [gt, et] : kFeedbackTypes)
        for (std::size_t n :
             {std::size_t{0}, std::size_t{1}, std::size_t{1000}, std::size_t{70001}}) {
          if (n > 5000 && gt != et) continue;  // the two-task size with equal dtypes, for time
          auto gv = adversarial(n, n + 1);
          if (n > 600) gv[600] = kNaN;  // one non-finite bucket: its residual is NaN
          expect_cpu_feedback_matches_reference(spec, {1234, 77, 9}, tensor(gv, gt),
                                                tensor(gc::test::gaussian(n, n + 2, 0.5f), et));
          if (HasFatalFailure()) return;
        }
    }
  });
}

TEST(CpuQuant, StreamedDecodeOfLargeOutputsMatchesPlainStores) {
  // f32 outputs of 64 MiB and more, 64-byte aligned, are written with streaming stores; the
  // same frame decoded 4 bytes off that alignment takes the plain stores (checked against
  // the reference above). An odd bucket mixes both with partial groups.
  const std::size_t n = (std::size_t{64} << 20) / 4 + 37;
  const auto spec = gc::parse_spec("qsgd:bucket=100,rounding=nearest").value();
  const tensor x(gc::test::gaussian(n, 21), gc::dtype::f32);
  ASSERT_TRUE(gc::set_cpu_isa(gc::cpu_isa_best()).ok());
  const auto frame = encode_on(spec, {5, 6, 7}, x.cview(), gc::backend::cpu, 2);
  std::vector<float> storage(2 * n + 64);
  const auto base = reinterpret_cast<std::uintptr_t>(storage.data());
  float* aligned = storage.data() + (64 - base % 64) % 64 / 4;
  float* unaligned = aligned + n + 16 + 1;  // 4 bytes past a 64-byte boundary
  for_each_isa([&] {
    for (int threads : {1, 3}) {
      gc::exec_options opt{gc::backend::cpu};
      opt.threads = threads;
      std::fill(storage.begin(), storage.end(), -1.0f);
      ASSERT_TRUE(gc::decode(frame, gc::tensor_view{aligned, n, gc::dtype::f32}, opt).ok());
      ASSERT_TRUE(gc::decode(frame, gc::tensor_view{unaligned, n, gc::dtype::f32}, opt).ok());
      ASSERT_EQ(std::memcmp(aligned, unaligned, n * 4), 0) << "threads=" << threads;
    }
  });
}

TEST(CpuQuant, OneByteShortIsRefusedWithoutWriting) {
  expect_one_byte_short_refused({"qsgd", "terngrad:clip=1", "minmax:bits=3,bucket=7"});
}

}  // namespace
