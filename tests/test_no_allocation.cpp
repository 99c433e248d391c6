// SPDX-License-Identifier: Apache-2.0
// The hot path does not allocate: with the workspace supplied, encode, decode,
// decode-accumulate and encode_with_feedback make no heap allocation, on every backend and
// for every codec (counted by replacing the global operator new in this test binary).
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <new>

#include "support/data.hpp"
#include "support/specs.hpp"

namespace {
std::atomic<long> g_allocations{0};
}  // namespace

// GCC pairs the inlined std::free below with the library's operator new and warns; this
// file replaces both, so the pair matches.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#endif

void* operator new(std::size_t size) {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(size == 0 ? 1 : size)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }

namespace gc = gradcodec;

TEST(NoAllocation, EncodeDecodeAndFeedbackWithAWorkspace) {
  const std::uint64_t n = 4097, rows = 17;
  const gc::test::tensor x(gc::test::gaussian(n, 3), gc::dtype::f32, rows);
  gc::test::tensor e(gc::test::gaussian(n, 4, 0.1f), gc::dtype::f32, rows);
  gc::test::tensor y = gc::test::tensor::zeros(n, gc::dtype::f32, rows);
  for (const char* text : gc::test::kSpecs) {
    const auto spec = gc::parse_spec(text).value();
    for (auto where : {gc::backend::reference, gc::backend::automatic}) {
      SCOPED_TRACE(std::string(text) + " on " + std::string(gc::backend_name(where)));
      std::vector<std::byte> frame(gc::encode_bound(spec, n, x.type, rows));
      std::vector<std::byte> ws(1);
      for (auto op : {gc::operation::encode, gc::operation::encode_with_feedback,
                      gc::operation::decode, gc::operation::decode_accumulate}) {
        const auto need = gc::workspace_size(spec, x.cview(), op, {where}).value();
        if (need > ws.size()) ws.resize(need);
      }
      gc::exec_options opt{where, ws};
      opt.threads = 2;
      // Warm up once (the CPU backend starts its worker threads on first use).
      ASSERT_TRUE(gc::encode(spec, {1, 2, 3}, x.cview(), frame, opt).ok());

      const long before = g_allocations.load();
      auto written = gc::encode(spec, {1, 2, 3}, x.cview(), frame, opt);
      ASSERT_TRUE(written.ok()) << written.error().message();
      const gc::const_bytes f(frame.data(), written.value());
      ASSERT_TRUE(gc::decode(f, y.mview(), opt).ok());
      ASSERT_TRUE(gc::decode_accumulate(f, y.mview(), 0.5f, opt).ok());
      ASSERT_TRUE(gc::encode_with_feedback(spec, {1, 2, 3}, x.cview(), e.mview(), frame, opt).ok());
      EXPECT_EQ(g_allocations.load() - before, 0);
    }
  }
}
