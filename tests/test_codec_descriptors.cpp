// SPDX-License-Identifier: Apache-2.0
// The codec descriptors (src/codecs/) against each other and against the frames: the table
// lists every codec under its id, a header carries its spec (spec_of rebuilds a spec that
// encodes the same bytes), a descriptor names exactly the header fields its frames set,
// and every mode bit a frame sets has a name.
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "gradcodec/blocks/codec_traits.hpp"
#include "support/codec_cases.hpp"
#include "support/data.hpp"
#include "support/specs.hpp"

namespace gc = gradcodec;

namespace {

const gc::context ctx{11, 4, 2};

std::vector<std::byte> encode(const gc::codec_spec& s, const std::vector<float>& x,
                              std::uint64_t rows) {
  auto f =
      gc::test::encode_vec(s, ctx, gc::const_tensor_view{x.data(), x.size(), gc::dtype::f32, rows});
  EXPECT_TRUE(f.ok()) << f.error().message();
  return f.ok() ? f.value() : std::vector<std::byte>{};
}

TEST(CodecTable, ListsEveryCodecUnderItsId) {
  const auto all = gc::all_codecs();
  ASSERT_EQ(all.size(), static_cast<std::size_t>(gc::codec_count));
  std::set<std::string_view> names;
  for (std::size_t i = 0; i < all.size(); ++i) {
    EXPECT_EQ(static_cast<std::size_t>(all[i].id), i + 1) << all[i].name;
    EXPECT_EQ(gc::codec_name(all[i].id), all[i].name);
    EXPECT_EQ(gc::codec_from_name(all[i].name).value(), all[i].id);
    EXPECT_EQ(&gc::info(all[i].id), &all[i]);
    EXPECT_TRUE(names.insert(all[i].name).second) << "duplicate name " << all[i].name;
  }
}

// Re-encoding with spec_of(header) gives the same frame, so the header carries every
// parameter the bytes depend on and spec_of reads each one back. Not for codecs whose
// count follows the data (a smaller count read back is another request), nor for PowerSGD
// (min_rate only decides dense or factored, which the header shows, and is not carried).
TEST(CodecDescriptors, HeaderCarriesTheSpec) {
  for (const char* text : gc::test::kSpecs) {
    const gc::codec_spec s = gc::parse_spec(text).value();
    const gc::blocks::codec_traits t = gc::blocks::traits_of(s.id);
    if (t.count_from_data || t.matrix) continue;
    for (const std::uint64_t n : {std::uint64_t{0}, std::uint64_t{7}, std::uint64_t{4097}}) {
      SCOPED_TRACE(std::string(text) + " n=" + std::to_string(n));
      const std::vector<float> x = gc::test::gaussian(n, 5);
      const std::uint64_t rows = gc::test::rows_for(n);
      const std::vector<std::byte> frame = encode(s, x, rows);
      const auto peeked = gc::peek(frame);
      ASSERT_TRUE(peeked.ok()) << peeked.error().message();
      const gc::frame_header h = peeked.value();
      const gc::codec_spec back = gc::spec_of(h);
      EXPECT_TRUE(gc::validate(back).ok()) << gc::to_string(back);
      EXPECT_EQ(encode(back, x, rows), frame) << "spec_of gave " << gc::to_string(back);
      EXPECT_EQ(gc::encode_bound(s, n, gc::dtype::f32, rows), frame.size());
    }
  }
}

// A descriptor names a header field (info().header) exactly when the codec's frame at its
// defaults sets it, and peek() refuses a frame that sets a field its codec leaves unnamed.
TEST(CodecDescriptors, NameTheHeaderFieldsTheirFramesSet) {
  const std::uint64_t n = 4097;
  const std::vector<float> x = gc::test::gaussian(n, 3);
  for (const gc::codec_info& c : gc::all_codecs()) {
    SCOPED_TRACE(std::string(c.name));
    const auto peeked = gc::peek(encode(gc::make_spec(c.id), x, 17));
    ASSERT_TRUE(peeked.ok()) << peeked.error().message();
    const gc::frame_header h = peeked.value();
    EXPECT_EQ(!c.header.count.empty(), h.count != 0);
    EXPECT_EQ(!c.header.group.empty(), h.group != 0);
    EXPECT_EQ(!c.header.level.empty(), h.level != 0);
    EXPECT_EQ(!c.header.param.empty(), h.param != 0.0f);
    gc::frame_header bad = h;
    if (c.header.level.empty()) {
      bad.level = 1;
      EXPECT_FALSE(gc::expected_payload_bytes(bad).ok()) << "an unnamed level was accepted";
    }
    bad = h;
    if (c.header.param.empty()) {
      bad.param = 1.0f;
      EXPECT_FALSE(gc::expected_payload_bytes(bad).ok()) << "an unnamed param was accepted";
    }
  }
}

// Every mode bit a frame sets changes what describe_mode says of it (gradcodec inspect).
TEST(CodecDescriptors, NameEveryModeTheirFramesSet) {
  const std::vector<float> x = gc::test::gaussian(64, 9);
  for (const char* text : gc::test::kSpecs) {
    SCOPED_TRACE(text);
    const auto peeked = gc::peek(encode(gc::parse_spec(text).value(), x, 64));
    ASSERT_TRUE(peeked.ok()) << peeked.error().message();
    const gc::frame_header h = peeked.value();
    for (unsigned bit = 0; bit < 8; ++bit) {
      const auto m = static_cast<std::uint8_t>(1u << bit);
      if ((h.mode & m) == 0) continue;
      EXPECT_NE(gc::describe_mode(h.codec, h.mode),
                gc::describe_mode(h.codec, static_cast<std::uint8_t>(h.mode & ~m)))
          << "mode bit " << bit << " has no name";
    }
  }
}

}  // namespace
