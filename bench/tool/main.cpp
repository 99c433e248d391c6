// SPDX-License-Identifier: Apache-2.0
//! @file
//! The gradcodec command-line tool: dispatch to a subcommand, and the one place where
//! failures become "gradcodec: error: <message>" on stderr and an exit code.
#include <algorithm>
#include <array>
#include <cstdio>
#include <iostream>
#include <new>
#include <string>
#include <vector>

#include "commands.hpp"
#include "error.hpp"
#include "gradcodec/version.hpp"

namespace gradcodec::tool {
namespace {

constexpr std::array<command, 8> commands{{
    {encode_spec, run_encode},
    {decode_spec, run_decode},
    {inspect_spec, run_inspect},
    {eval_spec, run_eval},
    {list_spec, run_list},
    {bench_spec, run_bench},
    {plan_spec, run_plan},
    {calibrate_spec, run_calibrate},
}};

std::string main_usage() {
  std::string u =
      "usage: gradcodec <command> [options] [arguments]\n\n"
      "Gradient-compression codecs: encode arrays to frames, decode, inspect, evaluate and\n"
      "benchmark them, and plan compressed allreduce.\n\n"
      "commands:\n";
  std::size_t width = 0;
  for (const auto& c : commands) width = std::max(width, c.spec.name.size());
  for (const auto& c : commands) {
    std::string name(c.spec.name);
    name.resize(width + 2, ' ');
    u.append("  ").append(name).append(c.spec.brief).append("\n");
  }
  u += "\nRun 'gradcodec <command> --help' for a command's options.\n"
       "Exit status: 0 success, 1 failure, 2 usage error.\n";
  return u;
}

//! One line, whatever the message holds.
std::string one_line(std::string s) {
  for (auto& ch : s)
    if (ch == '\n' || ch == '\r') ch = ' ';
  return s;
}

int dispatch(const std::vector<std::string>& argv) {
  if (argv.empty()) usage_fail("missing command (try 'gradcodec --help')");
  const std::string& name = argv[0];
  if (name == "--help" || name == "-h" || name == "help") {
    if (name == "help" && argv.size() > 1) {
      for (const auto& c : commands)
        if (c.spec.name == argv[1]) {
          std::cout << usage(c.spec);
          return 0;
        }
      usage_fail("unknown command '" + argv[1] + "' (try 'gradcodec --help')");
    }
    std::cout << main_usage();
    return 0;
  }
  if (name == "--version") {
    std::cout << "gradcodec " << version_string << "\n";
    return 0;
  }
  for (const auto& c : commands) {
    if (c.spec.name != name) continue;
    const std::vector<std::string> rest(argv.begin() + 1, argv.end());
    const parsed_args args = parse_args(c.spec, rest);
    if (args.help) {
      std::cout << usage(c.spec);
      return 0;
    }
    return c.run(args);
  }
  if (!name.empty() && name[0] == '-')
    usage_fail("unknown option '" + name + "' (try 'gradcodec --help')");
  usage_fail("unknown command '" + name + "' (try 'gradcodec --help')");
}

int report(const std::string& message, int code) {
  std::cout.flush();
  std::cerr << "gradcodec: error: " << one_line(message) << std::endl;
  return code;
}

}  // namespace

}  // namespace gradcodec::tool

int main(int argc, char** argv) {
  using namespace gradcodec::tool;
  try {
    const std::vector<std::string> args(argv + 1, argv + argc);
    const int code = dispatch(args);
    std::cout.flush();
    if (!std::cout) return report("cannot write to standard output", exit_failure);
    return code;
  } catch (const error& e) {
    return report(e.what(), e.exit_code());
  } catch (const std::bad_alloc&) {
    return report("out of memory", exit_failure);
  } catch (const std::exception& e) {
    return report(std::string("internal error: ") + e.what(), exit_failure);
  } catch (...) {
    return report("internal error", exit_failure);
  }
}
