// SPDX-License-Identifier: Apache-2.0
//! @file
//! The LSB-first code stream of the bucketed codecs (docs/format.md): code i of `bits`
//! bits (1..8) occupies stream bits [i*bits, (i+1)*bits), stream bit j being bit j % 8 of
//! byte j / 8. Element-wise access for any position, and a whole-word packer for 32
//! consecutive codes (they fill exactly `bits` little-endian 32-bit words).
#pragma once

#include <cstdint>

#include "gradcodec/blocks/config.hpp"

namespace gradcodec::blocks {

//! ORs code i into a zeroed stream. Codes of one byte must not be written concurrently.
GRADCODEC_HD void put_code(std::uint8_t* stream, std::uint64_t i, std::uint32_t bits,
                           std::uint32_t code) {
  const std::uint64_t j = i * bits;
  const std::uint32_t shift = static_cast<std::uint32_t>(j % 8);
  const std::uint32_t v = code << shift;
  std::uint8_t* at = stream + j / 8;
  at[0] = static_cast<std::uint8_t>(at[0] | (v & 0xFFu));
  if (shift + bits > 8) at[1] = static_cast<std::uint8_t>(at[1] | (v >> 8));
}

//! Code i of the stream.
GRADCODEC_HD std::uint32_t get_code(const std::uint8_t* stream, std::uint64_t i,
                                    std::uint32_t bits) {
  const std::uint64_t j = i * bits;
  const std::uint32_t shift = static_cast<std::uint32_t>(j % 8);
  const std::uint8_t* at = stream + j / 8;
  std::uint32_t v = at[0];
  if (shift + bits > 8) v |= static_cast<std::uint32_t>(at[1]) << 8;
  return (v >> shift) & ((1u << bits) - 1u);
}

//! Codes 32g .. 32g+31 (codes[0..32)) as the stream's words g*bits .. g*bits + bits - 1.
GRADCODEC_HD void pack32(const std::uint32_t* codes, std::uint32_t bits, std::uint32_t* words) {
  std::uint64_t acc = 0;
  std::uint32_t filled = 0, w = 0;
  for (int k = 0; k < 32; ++k) {
    acc |= static_cast<std::uint64_t>(codes[k]) << filled;
    filled += bits;
    if (filled >= 32) {
      words[w++] = static_cast<std::uint32_t>(acc);
      acc >>= 32;
      filled -= 32;
    }
  }
}

//! Code k (0..31) of the 32 codes held in words[0 .. bits).
GRADCODEC_HD std::uint32_t unpack32(const std::uint32_t* words, std::uint32_t bits, int k) {
  const std::uint32_t j = static_cast<std::uint32_t>(k) * bits;
  std::uint64_t v = words[j / 32];
  if (j % 32 + bits > 32) v |= static_cast<std::uint64_t>(words[j / 32 + 1]) << 32;
  return static_cast<std::uint32_t>(v >> (j % 32)) & ((1u << bits) - 1u);
}

}  // namespace gradcodec::blocks
