// SPDX-License-Identifier: Apache-2.0
// Writes the golden files of MANIFEST.txt that do not exist yet (existing ones are the
// frozen format and are never rewritten). Usage: golden_generate <tests/golden dir>.
#include <cstdio>
#include <filesystem>

#include "golden.hpp"

namespace gc = gradcodec;
namespace golden = gradcodec::test::golden;

int main(int argc, char** argv) {
  if (argc != 2) return std::fprintf(stderr, "usage: golden_generate DIR\n"), 2;
  const std::string dir = argv[1];
  for (const auto& e : golden::read_manifest(dir)) {
    const std::string base = dir + "/" + e.name;
    if (std::filesystem::exists(base + ".gcdc")) continue;
    const gc::test::tensor x(golden::input_values(e.n, e.ctx.seed), e.type, e.rows);
    auto spec = gc::parse_spec(e.spec);
    if (!spec) return std::fprintf(stderr, "%s: %s\n", e.name.c_str(), spec.error().message()), 1;
    auto frame = gc::test::encode_vec(spec.value(), e.ctx, x.cview());
    if (!frame) return std::fprintf(stderr, "%s: %s\n", e.name.c_str(), frame.error().message()), 1;
    gc::test::tensor y = gc::test::tensor::zeros(e.n, gc::dtype::f32, e.rows);
    if (auto st = gc::test::decode_vec(frame.value(), y.mview()); !st)
      return std::fprintf(stderr, "%s: %s\n", e.name.c_str(), st.message()), 1;
    golden::write_file(base + ".in", x.bytes.data(), x.bytes.size());
    golden::write_file(base + ".gcdc", frame.value().data(), frame.value().size());
    golden::write_file(base + ".out", y.bytes.data(), y.bytes.size());
    std::printf("wrote %s (%zu bytes)\n", e.name.c_str(), frame.value().size());
  }
  return 0;
}
