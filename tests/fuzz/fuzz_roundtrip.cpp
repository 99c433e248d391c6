// SPDX-License-Identifier: Apache-2.0
// Fuzzes encode: any codec configuration from the test list, any context, any finite input.
// Promises checked: encode succeeds within encode_bound, decode of the frame succeeds,
// encoding is deterministic, and every backend writes the same bytes.
#include <cmath>
#include <cstring>

#include "fuzz_common.hpp"
#include "gradcodec/blocks/float16.hpp"
#include "support/specs.hpp"

namespace gc = gradcodec;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  constexpr std::size_t spec_count = sizeof(gc::test::kSpecs) / sizeof(gc::test::kSpecs[0]);
  if (size < 10) return 0;
  const auto spec = gc::parse_spec(gc::test::kSpecs[data[0] % spec_count]).value();
  const auto type = static_cast<gc::dtype>(data[1] % 3);
  gc::context ctx{data[2], data[3], data[4]};
  data += 5;
  size -= 5;
  std::vector<float> values(size / 4);
  for (std::size_t i = 0; i < values.size(); ++i) {
    std::memcpy(&values[i], data + 4 * i, 4);
    if (!std::isfinite(values[i])) values[i] = 0.0f;
  }
  const std::uint64_t n = values.size();
  std::vector<std::byte> in(n * gc::dtype_size(type));
  for (std::uint64_t i = 0; i < n; ++i) {
    if (type == gc::dtype::f32)
      std::memcpy(in.data() + 4 * i, &values[i], 4);
    else {
      const std::uint16_t h = type == gc::dtype::f16 ? gc::blocks::f32_to_f16(values[i])
                                                     : gc::blocks::f32_to_bf16(values[i]);
      std::memcpy(in.data() + 2 * i, &h, 2);
    }
  }
  const std::uint64_t rows = n % 4 == 0 && n >= 8 ? 4 : 0;
  const gc::const_tensor_view x{in.data(), n, type, rows};
  const auto bound = gc::encode_bound(spec, n, type, rows);
  std::vector<std::byte> first;
  for (gc::backend b : gc::fuzz::fuzzed_backends()) {
    for (int repeat = 0; repeat < 2; ++repeat) {
      std::vector<std::byte> ws;
      const auto opt = gc::fuzz::with_workspace(
          b, ws, gc::workspace_size(spec, x, gc::operation::encode, {b}).value());
      std::vector<std::byte> out(bound);
      auto w = gc::encode(spec, ctx, x, out, opt);
      GRADCODEC_FUZZ_CHECK(w.ok());
      GRADCODEC_FUZZ_CHECK(w.value() <= bound);
      out.resize(w.value());
      if (first.empty()) first = out;
      GRADCODEC_FUZZ_CHECK(out == first);
      std::vector<float> dec(n);
      std::vector<std::byte> dws;
      const auto dopt = gc::fuzz::with_workspace(
          b, dws,
          gc::workspace_size(spec, {nullptr, n, gc::dtype::f32, rows}, gc::operation::decode, {b})
              .value());
      GRADCODEC_FUZZ_CHECK(gc::decode(out, {dec.data(), n, gc::dtype::f32, rows}, dopt).ok());
    }
  }
  return 0;
}
