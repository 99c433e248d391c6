// SPDX-License-Identifier: Apache-2.0
//! @file
//! A frame_verdict (gradcodec/expected_decode.hpp) as a status with a message.
#include <string>

#include "gradcodec/expected_decode.hpp"

namespace gradcodec {

namespace {

//! The header field that starts at byte `offset` (docs/format.md).
const char* field_name(std::uint32_t offset) {
  switch (offset) {
    case 5: return "codec";
    case 6: return "dtype";
    case 7: return "flags";
    case 8: return "n";
    case 16: return "payload size";
    case 24: return "count";
    case 32: return "group";
    case 36: return "level";
    case 38: return "mode";
    case 39: return "reserved byte";
    case 40: return "param";
  }
  return "unknown field";
}

status corrupt(std::string why) { return {status_code::corrupt_frame, why}; }

}  // namespace

status verdict_status(const frame_verdict& v) noexcept {
  switch (static_cast<verdict_code>(v.code)) {
    case verdict_code::ok: return {};
    case verdict_code::truncated: return corrupt("truncated: shorter than the 48-byte header");
    case verdict_code::bad_magic: return corrupt("bad magic (not a gradcodec frame)");
    case verdict_code::unsupported_version:
      return {status_code::unsupported_version, "unsupported format version"};
    case verdict_code::header_checksum: return corrupt("header checksum mismatch");
    case verdict_code::unexpected_field:
      return corrupt(std::string("header field '")
                         .append(field_name(v.field))
                         .append("' differs from the expected header"));
    case verdict_code::bad_count: return corrupt("count above n, or not matching the payload size");
    case verdict_code::size_mismatch:
      return corrupt("frame length differs from 48 + the header's payload size");
    case verdict_code::bad_indices:
      return corrupt("sparse indices out of range or not strictly ascending");
  }
  return corrupt(std::string("unknown verdict code ").append(std::to_string(v.code)));
}

}  // namespace gradcodec
