// SPDX-License-Identifier: Apache-2.0
//! @file
//! Shared pieces of the fuzz harnesses: run one call on a backend with its workspace.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <vector>

#include "gradcodec/gradcodec.hpp"

namespace gradcodec::fuzz {

//! Stop a harness on a broken promise (libFuzzer records the input as a crash).
#define GRADCODEC_FUZZ_CHECK(cond) \
  do {                             \
    if (!(cond)) std::abort();     \
  } while (0)

inline std::vector<backend> fuzzed_backends() {
  // automatic: the CPU backend for every codec it implements, else the reference again.
  return {backend::reference, backend::automatic};
}

inline exec_options with_workspace(backend where, std::vector<std::byte>& ws, std::size_t need) {
  ws.assign(need, std::byte{0});
  exec_options opt{where};
  opt.workspace = ws;
  return opt;
}

}  // namespace gradcodec::fuzz
