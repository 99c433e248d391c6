// SPDX-License-Identifier: Apache-2.0
// Fuzzes the spec-string parser: never crashes; an accepted spec prints to a canonical
// string that parses back to the same spec and prints identically.
#include <string>

#include "fuzz_common.hpp"

namespace gc = gradcodec;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  auto s = gc::parse_spec(text);
  if (!s.ok()) {
    GRADCODEC_FUZZ_CHECK(s.error().code() == gc::status_code::invalid_spec);
    return 0;
  }
  const std::string canonical = gc::to_string(s.value());
  auto again = gc::parse_spec(canonical);
  GRADCODEC_FUZZ_CHECK(again.ok());
  GRADCODEC_FUZZ_CHECK(gc::to_string(again.value()) == canonical);
  return 0;
}
