// SPDX-License-Identifier: Apache-2.0
//! @file
//! The subcommands: each declares its options and operands (for parsing and --help) and
//! a run function that returns the exit code or throws tool::error.
#pragma once

#include "args.hpp"

namespace gradcodec::tool {

struct command {
  const command_spec& spec;
  int (*run)(const parsed_args& args);
};

extern const command_spec encode_spec;
extern const command_spec decode_spec;
extern const command_spec inspect_spec;
extern const command_spec eval_spec;
extern const command_spec list_spec;
extern const command_spec bench_spec;
extern const command_spec plan_spec;
extern const command_spec calibrate_spec;

int run_encode(const parsed_args& args);
int run_decode(const parsed_args& args);
int run_inspect(const parsed_args& args);
int run_eval(const parsed_args& args);
int run_list(const parsed_args& args);
int run_bench(const parsed_args& args);
int run_plan(const parsed_args& args);
int run_calibrate(const parsed_args& args);

}  // namespace gradcodec::tool
