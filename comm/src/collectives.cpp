// SPDX-License-Identifier: Apache-2.0
//! @file
//! Timed and counted collectives.
#include "comm/src/collectives.hpp"

namespace gradcodec::comm::detail {

void count_traffic(run& r, std::uint64_t sent, std::uint64_t received) {
  if (r.times == nullptr) return;
  r.times->bytes_sent += sent;
  r.times->bytes_received += received;
  r.times->collectives += 1;
}

status wait(run& r, request& req) {
  timer t(r.times, &phase_times::comm_s);
  return r.comm.wait(req);
}

}  // namespace gradcodec::comm::detail
