// SPDX-License-Identifier: Apache-2.0
//! @file
//! The .gcdc file: one frame exactly as gradcodec::encode wrote it, followed by an
//! optional shape trailer (docs/format.md, "The gradcodec tool"):
//!
//!   offset 0          4 bytes   magic "GCSH"
//!   offset 4          u32       ndim (0..64)
//!   offset 8          ndim x u64  dims, C order
//!   offset 8+8*ndim   u32       CRC-32C of trailer bytes [0, 8+8*ndim)
//!
//! A file without a trailer holds a 1-D array of the frame's n elements.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "gradcodec/frame.hpp"

namespace gradcodec::tool {

inline constexpr std::uint32_t shape_magic = 0x48534347u;  //!< bytes "GCSH"
inline constexpr std::uint32_t max_ndim = 64;              //!< NumPy 2's limit

struct gcdc_file {
  std::vector<std::byte> bytes;  //!< the whole file
  frame_header header;           //!< checked by gradcodec::peek
  std::vector<std::uint64_t> shape;
  bool has_trailer = false;

  [[nodiscard]] const_bytes frame() const noexcept {
    return {bytes.data(), static_cast<std::size_t>(header.frame_bytes())};
  }
};

//! The trailer bytes for a shape.
std::vector<std::byte> shape_trailer(std::span<const std::uint64_t> shape);

//! Splits a file into its frame and shape: checks the header (peek), that the file holds
//! the whole frame, and that whatever follows is one valid trailer whose dims multiply to
//! the frame's n. Throws tool::error naming `name` otherwise.
gcdc_file parse_gcdc(std::vector<std::byte> bytes, const std::string& name);

gcdc_file read_gcdc(const std::string& path);

//! Writes frame + trailer(shape).
void write_gcdc(const std::string& path, const_bytes frame, std::span<const std::uint64_t> shape);

}  // namespace gradcodec::tool
