// SPDX-License-Identifier: Apache-2.0
// Overlapping buffers are refused with a clear error before anything is written: an encode
// whose frame overlaps its input, a decode (or decode-accumulate) whose output overlaps the
// frame, and an error-feedback encode whose residual overlaps the gradient or the frame.
// Buffers that only touch (adjacent ranges in one allocation) are fine.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "gradcodec/gradcodec.hpp"
#include "support/data.hpp"
#include "support/specs.hpp"

namespace gc = gradcodec;

namespace {

constexpr std::uint64_t kN = 1024;

class Overlap : public testing::TestWithParam<const char*> {};

TEST_P(Overlap, IsRefusedAndNothingIsWritten) {
  const auto spec = gc::parse_spec(GetParam()).value();
  const std::vector<float> x = gc::test::gaussian(kN, 1);
  const std::size_t bound = gc::encode_bound(spec, kN, gc::dtype::f32, 32);
  // One arena: [input | frame], so a frame that starts inside the input overlaps it.
  std::vector<std::byte> arena(kN * 4 + bound + 64);
  std::memcpy(arena.data(), x.data(), kN * 4);
  std::vector<std::byte> ws(1 << 22);
  for (auto where : {gc::backend::reference, gc::backend::automatic}) {
    SCOPED_TRACE(gc::backend_name(where));
    gc::exec_options opt{where, ws};
    const gc::const_tensor_view in{arena.data(), kN, gc::dtype::f32, 32};

    // Encode into a frame that starts at the input's last element.
    const auto before = arena;
    auto r = gc::encode(spec, {1, 2, 3}, in, {arena.data() + (kN - 1) * 4, bound}, opt);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.error().code(), gc::status_code::invalid_argument);
    EXPECT_NE(std::string(r.error().message()).find("overlaps"), std::string::npos);
    EXPECT_EQ(arena, before);

    // Adjacent is fine: the frame right after the input.
    std::byte* frame = arena.data() + kN * 4;
    r = gc::encode(spec, {1, 2, 3}, in, {frame, bound}, opt);
    ASSERT_TRUE(r.ok()) << r.error().message();
    const gc::const_bytes f(frame, r.value());

    // Decode into an output that overlaps the frame's first bytes (the input's tail).
    const auto encoded = arena;
    const gc::tensor_view out{arena.data() + 64, kN, gc::dtype::f32, 32};
    auto st = gc::decode(f, out, opt);
    EXPECT_EQ(st.code(), gc::status_code::invalid_argument) << st.message();
    st = gc::decode_accumulate(f, out, 0.5f, opt);
    EXPECT_EQ(st.code(), gc::status_code::invalid_argument) << st.message();
    EXPECT_EQ(arena, encoded);

    // Error feedback: the residual is the gradient itself, or inside the frame buffer.
    std::vector<float> e(kN, 0.25f);
    const gc::tensor_view same{arena.data(), kN, gc::dtype::f32, 32};
    std::vector<std::byte> out_frame(bound);
    r = gc::encode_with_feedback(spec, {1, 2, 3}, in, same, out_frame, opt);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.error().code(), gc::status_code::invalid_argument);
    const gc::tensor_view res_in_frame{out_frame.data(), std::min<std::uint64_t>(kN, bound / 4),
                                       gc::dtype::f32};
    const gc::const_tensor_view g_short{x.data(), res_in_frame.n, gc::dtype::f32};
    r = gc::encode_with_feedback(spec, {1, 2, 3}, g_short, res_in_frame, out_frame, opt);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.error().code(), gc::status_code::invalid_argument);
    EXPECT_EQ(arena, encoded);
  }
}

INSTANTIATE_TEST_SUITE_P(EveryCodec, Overlap, testing::ValuesIn(gc::test::kSpecs),
                         [](const testing::TestParamInfo<const char*>& p) {
                           std::string s = p.param;
                           for (auto& c : s)
                             if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
                           return s;
                         });

}  // namespace
