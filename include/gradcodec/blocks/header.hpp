// SPDX-License-Identifier: Apache-2.0
//! @file
//! The 48-byte frame header of docs/format.md, written by host or device code: a kernel
//! that finishes a frame on the GPU (setting the non-finite flag only the device knows)
//! writes exactly the bytes gradcodec::write_header writes.
#pragma once

#include <cstdint>

#include "gradcodec/blocks/config.hpp"
#include "gradcodec/blocks/float16.hpp"
#include "gradcodec/format.hpp"

namespace gradcodec::blocks {

//! CRC-32C (Castagnoli, reflected, init and final xor 0xFFFFFFFF), bit by bit: no table,
//! so it runs anywhere; the header needs it over 44 bytes only.
GRADCODEC_HD std::uint32_t crc32c_bitwise(const std::uint8_t* data, std::uint64_t size) {
  std::uint32_t c = 0xFFFFFFFFu;
  for (std::uint64_t i = 0; i < size; ++i) {
    c ^= data[i];
    for (int b = 0; b < 8; ++b) c = (c & 1u) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
  }
  return c ^ 0xFFFFFFFFu;
}

//! Little-endian `bytes`-byte value v at dst (any alignment).
GRADCODEC_HD void put_le(std::uint8_t* dst, std::uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) dst[i] = static_cast<std::uint8_t>(v >> (8 * i));
}

//! The header of h, checksum included, into dst[0 .. 48).
GRADCODEC_HD void serialize_header(const frame_header& h, std::uint8_t* dst) {
  for (int i = 0; i < 48; ++i) dst[i] = 0;
  put_le(dst + 0, frame_magic, 4);
  dst[4] = h.version;
  dst[5] = static_cast<std::uint8_t>(h.codec);
  dst[6] = static_cast<std::uint8_t>(h.type);
  dst[7] = h.flags;
  put_le(dst + 8, h.n, 8);
  put_le(dst + 16, h.payload_bytes, 8);
  put_le(dst + 24, h.count, 8);
  put_le(dst + 32, h.group, 4);
  put_le(dst + 36, h.level, 2);
  dst[38] = h.mode;
  put_le(dst + 40, float_bits(h.param), 4);
  put_le(dst + 44, crc32c_bitwise(dst, 44), 4);
}

}  // namespace gradcodec::blocks
