// SPDX-License-Identifier: Apache-2.0
// Fuzzes the cost profile's JSON reader (a profile is a file a job reads): never crashes,
// refuses with invalid_argument; what it accepts prints to JSON that reads back to the same
// JSON, and plans a bucket without a crash (every prediction ordered, the choice in range).
#include <cmath>
#include <string>

#include "fuzz_common.hpp"
#include "gradcodec/comm/calibrate.hpp"
#include "gradcodec/comm/plan.hpp"

namespace gc = gradcodec;
namespace gcc = gradcodec::comm;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size > (1 << 16)) return 0;
  const std::string text(reinterpret_cast<const char*>(data), size);
  auto p = gcc::profile_from_json(text);
  if (!p.ok()) {
    GRADCODEC_FUZZ_CHECK(p.error().code() == gc::status_code::invalid_argument);
    return 0;
  }
  const std::string canonical = gcc::profile_to_json(p.value());
  auto again = gcc::profile_from_json(canonical);
  GRADCODEC_FUZZ_CHECK(again.ok());
  GRADCODEC_FUZZ_CHECK(gcc::profile_to_json(again.value()) == canonical);

  gcc::plan_request req;
  req.elements = 1 << 20;
  req.ranks = 4;
  for (const gcc::codec_costs& c : p.value().compute.codecs)
    if (req.accept.size() < 4) req.accept.push_back(c.spec);
  auto planned = gcc::plan(req, p.value());
  if (!planned.ok()) return 0;  // e.g. no bf16 costs: refused, not crashed
  const gcc::plan_result& r = planned.value();
  GRADCODEC_FUZZ_CHECK(r.chosen < r.rows.size() && r.best_dense < r.rows.size());
  for (std::size_t i = 1; i < r.rows.size(); ++i)
    GRADCODEC_FUZZ_CHECK(!(r.rows[i].predicted.total_s < r.rows[i - 1].predicted.total_s));
  return 0;
}
