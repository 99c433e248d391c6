// SPDX-License-Identifier: Apache-2.0
//! @file
//! The command-line parser.
#include "args.hpp"

#include <charconv>

#include "error.hpp"

namespace gradcodec::tool {
namespace {

const option_spec* find_option(const command_spec& cmd, std::string_view name) {
  for (const auto& o : cmd.options)
    if (o.name == name) return &o;
  return nullptr;
}

std::string command_prefix(const command_spec& cmd) { return std::string(cmd.name) + ": "; }

}  // namespace

bool parsed_args::has(std::string_view name) const {
  for (const auto& [k, v] : given_)
    if (k == name) return true;
  return false;
}

std::optional<std::string> parsed_args::get(std::string_view name) const {
  std::optional<std::string> out;
  for (const auto& [k, v] : given_)
    if (k == name) out = v;
  return out;
}

std::vector<std::string> parsed_args::all(std::string_view name) const {
  std::vector<std::string> out;
  for (const auto& [k, v] : given_)
    if (k == name) out.push_back(v);
  return out;
}

std::uint64_t parsed_args::get_u64(std::string_view name, std::uint64_t fallback) const {
  const auto v = get(name);
  return v ? parse_u64("--" + std::string(name), *v) : fallback;
}

std::uint64_t parse_u64(std::string_view what, std::string_view text) {
  std::uint64_t v = 0;
  const auto* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, v);
  if (text.empty() || ec != std::errc{} || ptr != end)
    usage_fail(std::string(what) + ": expected an unsigned integer, got '" + std::string(text) +
               "'");
  return v;
}

parsed_args parse_args(const command_spec& cmd, std::span<const std::string> args) {
  parsed_args out;
  bool options_done = false;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (options_done || a.size() < 2 || a[0] != '-') {
      out.operands.push_back(a);
      continue;
    }
    if (a == "--") {
      options_done = true;
      continue;
    }
    if (a == "--help" || a == "-h") {
      out.help = true;
      return out;
    }
    if (a.rfind("--", 0) != 0) usage_fail(command_prefix(cmd) + "unknown option '" + a + "'");
    const auto eq = a.find('=');
    const std::string name = a.substr(2, eq == std::string::npos ? std::string::npos : eq - 2);
    const option_spec* o = find_option(cmd, name);
    if (o == nullptr) usage_fail(command_prefix(cmd) + "unknown option '--" + name + "'");
    if (!o->repeatable && out.has(name))
      usage_fail(command_prefix(cmd) + "option --" + name + " given more than once");
    if (o->metavar.empty()) {
      if (eq != std::string::npos)
        usage_fail(command_prefix(cmd) + "option --" + name + " takes no value");
      out.add(name, "");
    } else if (eq != std::string::npos) {
      out.add(name, a.substr(eq + 1));
    } else {
      if (i + 1 >= args.size())
        usage_fail(command_prefix(cmd) + "option --" + name + " needs a value (" +
                   std::string(o->metavar) + ")");
      out.add(name, args[++i]);
    }
  }
  for (const auto& o : cmd.options)
    if (o.required && !out.has(o.name))
      usage_fail(command_prefix(cmd) + "missing required option --" + std::string(o.name));
  if (out.operands.size() != cmd.positionals) {
    std::string m = command_prefix(cmd) + "expected ";
    if (cmd.positionals == 0)
      m += "no arguments";
    else
      m += std::to_string(cmd.positionals) + " argument" + (cmd.positionals > 1 ? "s" : "") + " (" +
           std::string(cmd.operands) + ")";
    m += ", got " + std::to_string(out.operands.size());
    if (out.operands.size() > cmd.positionals)
      m += " ('" + out.operands[cmd.positionals] + "' is extra)";
    usage_fail(m);
  }
  return out;
}

std::string usage(const command_spec& cmd) {
  std::string u = "usage: gradcodec " + std::string(cmd.name);
  for (const auto& o : cmd.options)
    if (o.required) u += " --" + std::string(o.name) + " " + std::string(o.metavar);
  u += " [options]";
  if (!cmd.operands.empty()) u += " " + std::string(cmd.operands);
  u += "\n\n" + std::string(cmd.summary) + "\n\noptions:\n";
  std::size_t width = 6;  // "--help"
  for (const auto& o : cmd.options) {
    const std::size_t w = 2 + o.name.size() + (o.metavar.empty() ? 0 : 1 + o.metavar.size());
    if (w > width) width = w;
  }
  const auto line = [&](std::string left, std::string_view help) {
    left.resize(width, ' ');
    u += "  " + left + "  " + std::string(help) + "\n";
  };
  for (const auto& o : cmd.options)
    line("--" + std::string(o.name) + (o.metavar.empty() ? "" : " " + std::string(o.metavar)),
         o.help);
  line("--help", "print this help and exit");
  if (!cmd.details.empty()) u += "\n" + std::string(cmd.details);
  return u;
}

}  // namespace gradcodec::tool
