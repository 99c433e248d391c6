// SPDX-License-Identifier: Apache-2.0
//! @file
//! The pipeline driver.
#include "comm/src/pipeline.hpp"

#include <algorithm>

#include "comm/src/collectives.hpp"
#include "comm/src/workspace.hpp"

namespace gradcodec::comm::detail {

status drive(run& r, program& p) {
  const int k_last = p.exchanges();
  const std::uint64_t n_seg = r.segments;
  // On device memory every host copy of a block header waits for the whole stream, the
  // next segment's transfer included, so staggering would overlap nothing; it would also
  // allocate while a transfer is in flight, which can deadlock several GPUs of a process.
  const bool staggered = r.cfg.pipeline && n_seg > 1 && r.mem.space() == memory_space::host;
  const std::size_t need = staggered ? static_cast<std::size_t>(k_last) + 1 : 1;
  if (r.ws.slots.size() < need) r.ws.slots.resize(need);
  status fatal;
  auto step = [&](int k, std::uint64_t i, slot& s) {
    if (fatal.ok()) fatal = p.stage(r, k, i, s);
  };
  if (!staggered) {
    for (std::uint64_t i = 0; i < n_seg && fatal.ok(); ++i)
      for (int k = 0; k <= k_last; ++k) step(k, i, r.ws.slots[0]);
  } else {
    const auto depth = static_cast<std::uint64_t>(k_last);
    for (std::uint64_t t = 0; t < n_seg + depth && fatal.ok(); ++t)
      for (int k = 0; k <= k_last; ++k) {
        const auto kk = static_cast<std::uint64_t>(k);
        if (t >= kk && t - kk < n_seg) step(k, t - kk, r.ws.slots[(t - kk) % (depth + 1)]);
      }
  }
  if (!fatal.ok()) {
    // Leave no transfer running into memory the caller may free.
    for (auto& s : r.ws.slots) (void)r.comm.wait(s.req);
    return fatal;
  }
  return {};
}

}  // namespace gradcodec::comm::detail
