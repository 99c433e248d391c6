// SPDX-License-Identifier: Apache-2.0
// Fuzzes every decoder: arbitrary bytes as a frame, decoded and decode-accumulated on every
// backend into a poisoned output with guard zones. Promises checked: no crash or sanitizer
// report, nothing written outside the output, nothing written at all on error, and every
// backend returns the same status and the same values (differential check). And
// decode_expected, against the frame's own header (with another count for threshold and
// dgc, whose counts may vary), succeeds exactly when decode does and writes the same
// (but for a threshold or dgc frame in a longer buffer, which only it accepts).
#include <cstring>

#include "fuzz_common.hpp"
#include "gradcodec/blocks/expected_header.hpp"
#include "gradcodec/expected_decode.hpp"

namespace gc = gradcodec;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const gc::const_bytes frame(reinterpret_cast<const std::byte*>(data), size);
  auto h = gc::peek(frame);
  // Cap the output so a header claiming 2^48 elements cannot exhaust memory.
  const std::uint64_t n = h.ok() ? h.value().n : 64;
  if (n > (1u << 20)) return 0;
  const std::uint64_t rows =
      h.ok() && h.value().codec == gc::codec_id::powersgd ? h.value().count : 0;
  constexpr std::size_t guard = 16;
  constexpr float poison = -12345.0f;

  std::vector<std::vector<float>> results;
  std::vector<gc::status_code> codes;
  for (bool accumulate : {false, true}) {
    for (gc::backend b : gc::fuzz::fuzzed_backends()) {
      std::vector<float> out(n + 2 * guard, poison);
      gc::tensor_view view{out.data() + guard, n, gc::dtype::f32, rows};
      std::vector<std::byte> ws;
      std::size_t need = 0;
      if (h.ok()) {
        auto w = gc::workspace_size(
            gc::spec_of(h.value()), view,
            accumulate ? gc::operation::decode_accumulate : gc::operation::decode, {b});
        need = w.ok() ? w.value() : 0;
      }
      const auto opt = gc::fuzz::with_workspace(b, ws, need);
      const gc::status st =
          accumulate ? gc::decode_accumulate(frame, view, 0.5f, opt) : gc::decode(frame, view, opt);
      for (std::size_t i = 0; i < guard; ++i) {
        GRADCODEC_FUZZ_CHECK(std::memcmp(&out[i], &poison, 4) == 0);
        GRADCODEC_FUZZ_CHECK(std::memcmp(&out[guard + n + i], &poison, 4) == 0);
      }
      if (!st.ok())
        for (float v : out) GRADCODEC_FUZZ_CHECK(std::memcmp(&v, &poison, 4) == 0);
      if (h.ok()) {
        gc::frame_header e = h.value();
        if (e.codec == gc::codec_id::threshold || e.codec == gc::codec_id::dgc)
          e.count = e.payload_bytes = 0;
        std::vector<float> out2(n + 2 * guard, poison);
        const gc::tensor_view view2{out2.data() + guard, n, gc::dtype::f32, rows};
        gc::frame_verdict verdict{};
        const gc::status st2 =
            accumulate ? gc::decode_accumulate_expected(e, frame, view2, 0.5f, &verdict, opt)
                       : gc::decode_expected(e, frame, view2, &verdict, opt);
        // A threshold or dgc frame in a longer buffer is one decode_expected accepts.
        const bool capacity =
            gc::blocks::traits_of(e.codec).count_from_data && size > h.value().frame_bytes();
        if (!capacity) {
          GRADCODEC_FUZZ_CHECK(st2.ok() == st.ok());
          GRADCODEC_FUZZ_CHECK(std::memcmp(out2.data(), out.data(), out.size() * 4) == 0);
        }
        for (std::size_t i = 0; i < guard; ++i) {
          GRADCODEC_FUZZ_CHECK(std::memcmp(&out2[i], &poison, 4) == 0);
          GRADCODEC_FUZZ_CHECK(std::memcmp(&out2[guard + n + i], &poison, 4) == 0);
        }
      }
      codes.push_back(st.code());
      results.push_back(std::move(out));
    }
  }
  // Every backend agrees, bit for bit, on the status and on the values.
  const std::size_t per = gc::fuzz::fuzzed_backends().size();
  for (std::size_t i = 0; i < results.size(); ++i) {
    const std::size_t first = (i / per) * per;
    GRADCODEC_FUZZ_CHECK(codes[i] == codes[first]);
    GRADCODEC_FUZZ_CHECK(
        std::memcmp(results[i].data(), results[first].data(), results[i].size() * 4) == 0);
  }
  return 0;
}
