// SPDX-License-Identifier: Apache-2.0
// Fuzzes the two checkpoint readers (checkpoints are files a job reads back, so they are
// untrusted bytes): comm::load_state (allreduce error-feedback state) and
// powersgd_peek_state / powersgd_load_state. Neither may crash or accept bytes it cannot
// write back: whatever it accepts saves again to exactly the same bytes. The first input
// byte picks the reader.
#include <cstring>
#include <vector>

#include "fuzz_common.hpp"
#include "gradcodec/comm/state.hpp"
#include "gradcodec/powersgd.hpp"

namespace gc = gradcodec;

namespace {

// A state's arrays are allocated from its lengths only after every check passed; keep
// the harness from accepting (and allocating) absurd sizes from tiny inputs anyway.
constexpr std::size_t max_input = 1 << 20;

void comm_state(gc::const_bytes in) {
  gc::comm::allreduce_state s;
  s.steps = 99;  // a refused input must leave the target alone
  if (!gc::comm::load_state(in, s).ok()) {
    GRADCODEC_FUZZ_CHECK(s.steps == 99 && !s.initialized());
    return;
  }
  GRADCODEC_FUZZ_CHECK(gc::comm::state_bytes(s) == in.size());
  std::vector<std::byte> again(in.size());
  auto saved = gc::comm::save_state(s, again);
  GRADCODEC_FUZZ_CHECK(saved.ok() && saved.value() == in.size());
  GRADCODEC_FUZZ_CHECK(std::memcmp(again.data(), in.data(), in.size()) == 0);
}

void powersgd_state(gc::const_bytes in) {
  auto info = gc::powersgd_peek_state(in);
  if (!info.ok()) return;
  const auto i = info.value();
  GRADCODEC_FUZZ_CHECK(gc::powersgd_state_bytes(i.rows, i.cols, i.rank) == in.size());
  std::vector<float> q(i.cols * i.rank), residual(i.rows * i.cols);
  auto loaded = gc::powersgd_load_state(in, i.rows, i.cols, i.rank, q, residual);
  GRADCODEC_FUZZ_CHECK(loaded.ok());
  std::vector<std::byte> again(in.size());
  auto saved = gc::powersgd_save_state(loaded.value(), q, residual, again);
  GRADCODEC_FUZZ_CHECK(saved.ok() && saved.value() == in.size());
  GRADCODEC_FUZZ_CHECK(std::memcmp(again.data(), in.data(), in.size()) == 0);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 1 || size > max_input) return 0;
  const gc::const_bytes in(reinterpret_cast<const std::byte*>(data) + 1, size - 1);
  if (data[0] % 2 == 0)
    comm_state(in);
  else
    powersgd_state(in);
  return 0;
}
