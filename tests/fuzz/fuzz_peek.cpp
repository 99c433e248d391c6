// SPDX-License-Identifier: Apache-2.0
// Fuzzes header parsing: peek never crashes, and whatever it accepts is self-consistent
// (a valid spec can be rebuilt from it, the payload size matches the fields, and writing
// the parsed header back gives the same 48 bytes).
#include <cstring>

#include "fuzz_common.hpp"

namespace gc = gradcodec;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const gc::const_bytes bytes(reinterpret_cast<const std::byte*>(data), size);
  auto h = gc::peek(bytes);
  if (!h.ok()) return 0;
  GRADCODEC_FUZZ_CHECK(size >= gc::header_bytes);
  GRADCODEC_FUZZ_CHECK(gc::expected_payload_bytes(h.value()).value() == h.value().payload_bytes);
  GRADCODEC_FUZZ_CHECK(gc::validate(gc::spec_of(h.value())).ok());
  std::byte again[gc::header_bytes];
  gc::write_header(h.value(), again);
  GRADCODEC_FUZZ_CHECK(std::memcmp(again, data, gc::header_bytes) == 0);
  return 0;
}
