// SPDX-License-Identifier: Apache-2.0
//! @file
//! Helpers the codec descriptors share: spec printing and the errors they report.
#include <charconv>
#include <string>

#include "src/codecs/descriptor.hpp"

namespace gradcodec::detail {
namespace {

template <class T>
std::string shortest(T v) {
  char buf[64];
  auto [ptr, ec] = std::to_chars(buf, buf + sizeof buf, v);
  return ec == std::errc{} ? std::string(buf, ptr) : std::string("nan");
}

}  // namespace

void spec_printer::add(std::string_view key, std::string_view value) {
  out_.append(first_ ? ":" : ",").append(key).append("=").append(value);
  first_ = false;
}

void spec_printer::add(std::string_view key, std::uint64_t value) {
  add(key, std::to_string(value));
}

void spec_printer::add_double(std::string_view key, double value) { add(key, shortest(value)); }

void spec_printer::add_float(std::string_view key, float value) { add(key, shortest(value)); }

status out_of_range(const codec_spec& s, std::string_view key, std::string_view want) {
  return {
      status_code::invalid_spec,
      std::string(codec_name(s.id)).append(": ").append(key).append(" must be in ").append(want)};
}

status corrupt_frame(std::string_view why) { return {status_code::corrupt_frame, why}; }

void append_name(std::string& out, std::string_view name) {
  out.append(out.empty() ? "" : ",").append(name);
}

}  // namespace gradcodec::detail
