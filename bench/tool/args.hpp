// SPDX-License-Identifier: Apache-2.0
//! @file
//! A small command-line parser: each subcommand declares its options (--name VALUE or
//! --name=VALUE, or a plain --flag) and how many positional arguments it takes. Every
//! mistake is a usage error (exit code 2) with a message that names the culprit.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace gradcodec::tool {

struct option_spec {
  std::string_view name;     //!< written --name
  std::string_view metavar;  //!< the value's name in the usage text; empty for a flag
  std::string_view help;
  bool required = false;
  bool repeatable = false;  //!< may be given more than once (values accumulate)
};

struct command_spec {
  std::string_view name;
  std::string_view brief;     //!< one sentence for gradcodec --help's list of commands
  std::string_view operands;  //!< e.g. "in.npy out.gcdc" (for the usage line)
  std::string_view summary;
  std::string_view details;  //!< printed after the options (notes, examples)
  std::span<const option_spec> options;
  std::size_t positionals = 0;  //!< exact number of operands
};

//! The --backend option every subcommand takes.
inline constexpr option_spec backend_option{
    "backend", "B", "reference|cpu|cuda|auto (default auto): where the codecs run"};

class parsed_args {
 public:
  bool help = false;  //!< --help or -h was given: print usage, ignore the rest
  std::vector<std::string> operands;

  [[nodiscard]] bool has(std::string_view name) const;
  //! The value of an option, if given.
  [[nodiscard]] std::optional<std::string> get(std::string_view name) const;
  //! Every value of a repeatable option, in order.
  [[nodiscard]] std::vector<std::string> all(std::string_view name) const;
  //! An unsigned integer option (usage error when it does not parse), or the fallback.
  [[nodiscard]] std::uint64_t get_u64(std::string_view name, std::uint64_t fallback) const;

  void add(std::string name, std::string value) {
    given_.emplace_back(std::move(name), std::move(value));
  }

 private:
  std::vector<std::pair<std::string, std::string>> given_;
};

//! Parses the arguments after the subcommand name.
parsed_args parse_args(const command_spec& cmd, std::span<const std::string> args);

//! The usage text of a subcommand (synopsis, summary, options, details).
std::string usage(const command_spec& cmd);

//! Parses a decimal unsigned integer; usage error naming `what` otherwise.
std::uint64_t parse_u64(std::string_view what, std::string_view text);

}  // namespace gradcodec::tool
