// SPDX-License-Identifier: Apache-2.0
//! @file
//! The planner: candidates generated in a fixed order, predicted, sorted stably.
#include "gradcodec/comm/plan.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "comm/src/chunks.hpp"
#include "gradcodec/bounds.hpp"

namespace gradcodec::comm {

using detail::unit_of;

bool is_dense(const candidate& c) noexcept {
  return c.uncompressed || (c.spec.id == codec_id::bf16 && c.how == strategy::dense);
}

namespace {

bool feedback_for(const plan_request& req, const codec_spec& spec) {
  return req.error_feedback.value_or(bounds(spec, 0).feedback_safe);
}

//! Segment lengths that differ for n elements (a length at or above n is one segment).
std::vector<std::uint64_t> distinct_segments(const plan_request& req, std::uint64_t unit) {
  std::vector<std::uint64_t> out;
  for (std::uint64_t s : req.segments) {
    std::uint64_t len = s == 0 ? 0 : (s + unit - 1) / unit * unit;
    if (len >= req.elements) len = 0;
    if (std::find(out.begin(), out.end(), len) == out.end()) out.push_back(len);
  }
  if (out.empty()) out.push_back(0);
  return out;
}

void add_codec(const plan_request& req, const codec_spec& spec, std::vector<candidate>& out) {
  const bool ef = feedback_for(req, spec);
  for (strategy how :
       {strategy::allgather, strategy::two_phase, strategy::dense, strategy::majority_vote}) {
    if (!supported_strategies(spec.id).contains(how)) continue;
    if (std::find(req.excluded.begin(), req.excluded.end(), std::pair{spec.id, how}) !=
        req.excluded.end())
      continue;
    if (spec.id == codec_id::powersgd) {  // one segment per tensor: nothing to pipeline
      out.push_back({false, spec, how, false, 0, ef});
      continue;
    }
    for (std::uint64_t seg : distinct_segments(req, unit_of(spec)))
      for (bool pipe : {false, true}) {
        if (pipe && (seg == 0 || !req.try_pipelining)) continue;
        out.push_back({false, spec, how, pipe, seg, ef});
      }
  }
}

std::string seconds(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g ms", s * 1e3);
  return buf;
}

}  // namespace

std::string describe(const candidate& c) {
  if (c.uncompressed)
    return c.transport_allreduce ? "uncompressed (f32 mean, transport allreduce)"
                                 : "uncompressed (f32 mean)";
  std::string s = to_string(c.spec);
  s.append(" ").append(strategy_name(c.how));
  if (c.segment_elements != 0) s.append(" segment=").append(std::to_string(c.segment_elements));
  if (c.pipeline) s.append(" pipeline=on");
  s.append(c.error_feedback ? " ef=on" : " ef=off");
  if (c.transport_allreduce) s.append(" (transport allreduce)");
  return s;
}

allreduce_config plan_result::config() const { return config_of(choice().config); }

allreduce_config config_of(const candidate& c) {
  allreduce_config cfg;
  cfg.uncompressed = c.uncompressed;
  cfg.spec = c.spec;
  cfg.how = c.how;
  cfg.pipeline = c.pipeline;
  cfg.segment_elements = c.segment_elements;
  cfg.error_feedback = c.error_feedback;
  return cfg;
}

result<plan_result> plan(const plan_request& req, const cost_profile& profile) {
  if (req.ranks < 1) return status{status_code::invalid_argument, "plan: ranks must be >= 1"};
  if (req.nodes && req.nodes->nodes * req.nodes->per_node != req.ranks)
    return status{status_code::invalid_argument, "plan: nodes x ranks per node must be ranks"};
  if (!(req.margin >= 0 && req.margin < 1))
    return status{status_code::invalid_argument, "plan: margin must be in [0, 1)"};
  for (const codec_spec& s : req.accept)
    if (status v = validate(s); !v.ok()) return v;

  std::vector<candidate> all;
  all.push_back(candidate{true, make_spec(codec_id::bf16), strategy::dense, false, 0, false});
  const codec_spec bf16 = make_spec(codec_id::bf16);
  add_codec(req, bf16, all);
  for (const codec_spec& s : req.accept)
    if (!(s == bf16)) add_codec(req, s, all);

  for (candidate& c : all) c.transport_allreduce = req.transport_allreduce;
  plan_result out;
  out.rows.reserve(all.size());
  for (const candidate& c : all) {
    auto p = req.nodes ? predict_hierarchical(c, req.elements, *req.nodes, profile, req.tensors)
                       : predict(c, req.elements, req.ranks, profile, req.tensors);
    if (!p.ok()) return p.error();
    // A profile with absurd numbers can overflow a prediction: it sorts last, never
    // breaks the order.
    if (!std::isfinite(p.value().total_s)) p.value().total_s = HUGE_VAL;
    out.rows.push_back({c, p.value()});
  }
  std::stable_sort(out.rows.begin(), out.rows.end(), [](const plan_row& a, const plan_row& b) {
    return a.predicted.total_s < b.predicted.total_s;
  });
  out.best_dense =
      static_cast<std::size_t>(std::find_if(out.rows.begin(), out.rows.end(),
                                            [](const plan_row& r) { return is_dense(r.config); }) -
                               out.rows.begin());
  const plan_row& fastest = out.rows.front();
  const plan_row& dense = out.rows[out.best_dense];
  if (is_dense(fastest.config)) {
    out.chosen = 0;
    out.reason = "dense is fastest: " + describe(fastest.config) + ", " +
                 seconds(fastest.predicted.total_s) + " predicted";
  } else if (fastest.predicted.total_s <= (1 - req.margin) * dense.predicted.total_s) {
    out.chosen = 0;
    out.reason = describe(fastest.config) + ": " + seconds(fastest.predicted.total_s) +
                 " predicted against " + seconds(dense.predicted.total_s) + " for " +
                 describe(dense.config);
  } else {
    out.chosen = out.best_dense;
    out.reason = "compression does not pay by the margin: " + describe(fastest.config) + " " +
                 seconds(fastest.predicted.total_s) + " against " + describe(dense.config) + " " +
                 seconds(dense.predicted.total_s);
  }
  return out;
}

}  // namespace gradcodec::comm
