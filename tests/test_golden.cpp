// SPDX-License-Identifier: Apache-2.0
// The golden frames freeze wire format version 1: every backend re-encodes each golden
// input to the committed bytes, and decodes each committed frame to the committed values.
#include <gtest/gtest.h>

#include "golden/golden.hpp"

namespace gc = gradcodec;
namespace golden = gradcodec::test::golden;

namespace {

std::vector<golden::entry> entries() { return golden::read_manifest(GRADCODEC_GOLDEN_DIR); }

std::vector<gc::backend> backends() {
  std::vector<gc::backend> b{gc::backend::reference};
  b.push_back(gc::backend::automatic);  // the CPU backend for every codec it implements
  return b;
}

TEST(Golden, ManifestCoversEveryCodec) {
  std::vector<bool> seen(gc::codec_count + 1, false);
  for (const auto& e : entries()) seen[static_cast<int>(gc::parse_spec(e.spec).value().id)] = true;
  for (int id = 1; id <= gc::codec_count; ++id) EXPECT_TRUE(seen[id]) << gc::codec_name(static_cast<gc::codec_id>(id));
}

TEST(Golden, ReencodesToTheCommittedBytesAndDecodesToTheCommittedValues) {
  const auto list = entries();
  ASSERT_GE(list.size(), 12u);
  for (const auto& e : list) {
    SCOPED_TRACE(e.name);
    const std::string base = std::string(GRADCODEC_GOLDEN_DIR) + "/" + e.name;
    const auto in = golden::read_file(base + ".in");
    const auto frame = golden::read_file(base + ".gcdc");
    const auto out = golden::read_file(base + ".out");
    ASSERT_EQ(in.size(), e.n * gc::dtype_size(e.type));
    ASSERT_EQ(out.size(), e.n * 4);
    const gc::const_tensor_view x{in.data(), e.n, e.type, e.rows};
    const auto spec = gc::parse_spec(e.spec).value();
    for (auto b : backends()) {
      SCOPED_TRACE(std::string(gc::backend_name(b)));
      auto again = gc::test::encode_vec(spec, e.ctx, x, b);
      ASSERT_TRUE(again.ok()) << again.error().message();
      EXPECT_EQ(again.value(), frame);
      gc::test::tensor y = gc::test::tensor::zeros(e.n, gc::dtype::f32, e.rows);
      ASSERT_TRUE(gc::test::decode_vec(frame, y.mview(), b).ok());
      EXPECT_EQ(y.bytes, out);
    }
  }
}

}  // namespace
