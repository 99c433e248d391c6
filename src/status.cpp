// SPDX-License-Identifier: Apache-2.0
#include "gradcodec/status.hpp"

#include <algorithm>

#include "gradcodec/dtype.hpp"

namespace gradcodec {

std::string_view status_code_name(status_code c) noexcept {
  switch (c) {
    case status_code::ok: return "ok";
    case status_code::invalid_argument: return "invalid_argument";
    case status_code::invalid_spec: return "invalid_spec";
    case status_code::output_too_small: return "output_too_small";
    case status_code::workspace_too_small: return "workspace_too_small";
    case status_code::corrupt_frame: return "corrupt_frame";
    case status_code::unsupported_version: return "unsupported_version";
    case status_code::shape_mismatch: return "shape_mismatch";
    case status_code::nonfinite_input: return "nonfinite_input";
    case status_code::backend_unavailable: return "backend_unavailable";
    case status_code::device_error: return "device_error";
    case status_code::comm_error: return "comm_error";
    case status_code::internal_error: return "internal_error";
  }
  return "unknown";
}

status::status(status_code code, std::string_view message) noexcept : code_(code) {
  const std::size_t len = std::min(message.size(), max_message);
  std::copy_n(message.data(), len, message_);
  message_[len] = '\0';
}

const char* status::message() const noexcept {
  return message_[0] != '\0' ? message_ : status_code_name(code_).data();
}

std::string_view dtype_name(dtype t) noexcept {
  switch (t) {
    case dtype::f32: return "f32";
    case dtype::f16: return "f16";
    case dtype::bf16: return "bf16";
  }
  return "?";
}

}  // namespace gradcodec
