// SPDX-License-Identifier: Apache-2.0
//! @file
//! Status codes and a status value with a message. The core never throws; every fallible
//! call returns a [[nodiscard]] status or result<T>.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <utility>

namespace gradcodec {

//! Stable numbers: they appear in logs and in the Python exceptions.
enum class status_code : std::uint8_t {
  ok = 0,
  invalid_argument = 1,     //!< a view, size or option the call cannot accept
  invalid_spec = 2,         //!< a codec spec string or value that does not parse or validate
  output_too_small = 3,     //!< the caller's output buffer cannot hold the result
  workspace_too_small = 4,  //!< the caller's workspace is smaller than workspace_size()
  corrupt_frame = 5,        //!< an encoded buffer failed a check; nothing was written
  unsupported_version = 6,  //!< the frame's format version is not one this library reads
  shape_mismatch = 7,       //!< an output or state view does not match the frame or spec
  nonfinite_input = 8,      //!< NaN/Inf in the input where the caller asked for an error
  backend_unavailable = 9,  //!< the requested backend or ISA is not built or not present
  device_error = 10,        //!< a CUDA call failed
  comm_error = 11,          //!< a communicator call failed or ranks disagreed
  internal_error = 12,
};

//! The name of a code, e.g. "corrupt_frame".
std::string_view status_code_name(status_code c) noexcept;

//! A code plus a short human-readable message (kept inline: making an error never
//! allocates, so hot-path errors are free of exceptions too).
class [[nodiscard]] status {
 public:
  static constexpr std::size_t max_message = 119;

  constexpr status() noexcept = default;
  status(status_code code, std::string_view message) noexcept;

  [[nodiscard]] bool ok() const noexcept { return code_ == status_code::ok; }
  explicit operator bool() const noexcept { return ok(); }
  [[nodiscard]] status_code code() const noexcept { return code_; }
  //! The message, or the code's name when none was given. Never null.
  [[nodiscard]] const char* message() const noexcept;

  static status success() noexcept { return {}; }

 private:
  status_code code_ = status_code::ok;
  char message_[max_message + 1] = {};
};

//! A value or an error status.
template <class T>
class [[nodiscard]] result {
 public:
  result(T value) noexcept : value_(std::move(value)) {}  // NOLINT: implicit by design
  result(status st) noexcept : status_(std::move(st)) {}  // NOLINT
  [[nodiscard]] bool ok() const noexcept { return status_.ok(); }
  explicit operator bool() const noexcept { return ok(); }
  [[nodiscard]] const status& error() const noexcept { return status_; }
  [[nodiscard]] const T& value() const& noexcept { return value_; }
  [[nodiscard]] T& value() & noexcept { return value_; }
  [[nodiscard]] T value_or(T fallback) const noexcept { return ok() ? value_ : fallback; }

 private:
  T value_{};
  status status_{};
};

}  // namespace gradcodec
