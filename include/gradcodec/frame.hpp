// SPDX-License-Identifier: Apache-2.0
//! @file
//! The frame: a 48-byte little-endian header followed by the codec's payload.
//! docs/format.md specifies it byte by byte.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "gradcodec/dtype.hpp"
#include "gradcodec/format.hpp"
#include "gradcodec/spec.hpp"
#include "gradcodec/status.hpp"
#include "gradcodec/views.hpp"

namespace gradcodec {

//! Reads and checks a header (magic, version, checksum, codec id, dtype, reserved bits, and
//! that the payload size is the one the header's fields imply). `frame` may hold only the
//! header or more; nothing is decoded.
result<frame_header> peek(const_bytes frame) noexcept;

//! Writes `h` (with its checksum) into the first header_bytes of `dst`.
void write_header(const frame_header& h, std::byte* dst) noexcept;

//! The exact payload size a well-formed frame with these header fields has, or an error
//! when the fields are inconsistent (the decoder's first line of defence).
result<std::uint64_t> expected_payload_bytes(const frame_header& h) noexcept;

//! What a header's mode bits say for a codec, comma-separated ("stochastic,rotated"), or
//! "none" (gradcodec inspect).
std::string describe_mode(codec_id codec, std::uint8_t mode);
//! CRC-32C (Castagnoli) of a byte range: the header checksum.
std::uint32_t crc32c(const std::byte* data, std::size_t size) noexcept;

}  // namespace gradcodec
