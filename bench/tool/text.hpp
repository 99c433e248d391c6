// SPDX-License-Identifier: Apache-2.0
//! @file
//! Small text helpers for the tool's output.
#pragma once

#include <cstdint>
#include <string>

namespace gradcodec::tool {

//! printf into a std::string.
std::string strprintf(const char* format, ...) __attribute__((format(printf, 1, 2)));

//! "4.742" bits per element of a frame (header included), or "n/a" when n is 0.
std::string bits_per_element(std::uint64_t frame_bytes, std::uint64_t n);

//! "6.75" = input bytes / frame bytes.
std::string compression_ratio(std::uint64_t input_bytes, std::uint64_t frame_bytes);

//! Pads (or leaves) s to `width` columns; right-aligned when `right`.
std::string pad(const std::string& s, std::size_t width, bool right = false);

}  // namespace gradcodec::tool
