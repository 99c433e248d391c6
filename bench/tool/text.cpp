// SPDX-License-Identifier: Apache-2.0
//! @file
//! Small text helpers.
#include "text.hpp"

#include <cstdarg>
#include <cstdio>
#include <vector>

namespace gradcodec::tool {

std::string strprintf(const char* format, ...) {
  va_list args;
  va_start(args, format);
  va_list copy;
  va_copy(copy, args);
  const int len = std::vsnprintf(nullptr, 0, format, copy);
  va_end(copy);
  std::string out;
  if (len > 0) {
    std::vector<char> buf(static_cast<std::size_t>(len) + 1);
    std::vsnprintf(buf.data(), buf.size(), format, args);
    out.assign(buf.data(), static_cast<std::size_t>(len));
  }
  va_end(args);
  return out;
}

std::string bits_per_element(std::uint64_t frame_bytes, std::uint64_t n) {
  if (n == 0) return "n/a";
  return strprintf("%.4g", 8.0 * static_cast<double>(frame_bytes) / static_cast<double>(n));
}

std::string compression_ratio(std::uint64_t input_bytes, std::uint64_t frame_bytes) {
  if (frame_bytes == 0) return "n/a";
  return strprintf("%.4g", static_cast<double>(input_bytes) / static_cast<double>(frame_bytes));
}

std::string pad(const std::string& s, std::size_t width, bool right) {
  if (s.size() >= width) return s;
  const std::string fill(width - s.size(), ' ');
  return right ? fill + s : s + fill;
}

}  // namespace gradcodec::tool
