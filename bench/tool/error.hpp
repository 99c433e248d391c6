// SPDX-License-Identifier: Apache-2.0
//! @file
//! How the tool reports failure: every problem becomes a tool::error carrying its exit
//! code, and main() turns it into one "gradcodec: error: ..." line on stderr. The library
//! itself never throws; exceptions live only at this edge.
#pragma once

#include <stdexcept>
#include <string>

#include "gradcodec/status.hpp"

namespace gradcodec::tool {

//! Exit codes: 0 success, 1 an operation failed (files, data, codecs), 2 a usage error.
inline constexpr int exit_failure = 1;
inline constexpr int exit_usage = 2;

class error : public std::runtime_error {
 public:
  error(int exit_code, const std::string& message)
      : std::runtime_error(message), exit_code_(exit_code) {}
  [[nodiscard]] int exit_code() const noexcept { return exit_code_; }

 private:
  int exit_code_;
};

//! An operation failed (exit code 1).
[[noreturn]] inline void fail(const std::string& message) { throw error(exit_failure, message); }

//! The command line is wrong (exit code 2).
[[noreturn]] inline void usage_fail(const std::string& message) {
  throw error(exit_usage, message);
}

//! "what: code_name: message" for a library status.
inline std::string describe(const std::string& what, const status& st) {
  return what + ": " + std::string(status_code_name(st.code())) + ": " + st.message();
}

}  // namespace gradcodec::tool
