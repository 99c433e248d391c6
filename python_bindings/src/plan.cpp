// SPDX-License-Identifier: Apache-2.0
//! @file
//! The planner from Python (gradcodec/comm/plan.hpp, calibrate.hpp): calibrate over a
//! Communicator, the codec costs of this process alone, plan() on a profile given as its
//! JSON text, and the drift tracker. gradcodec.torch's HookState(spec="auto") is built on
//! these.
#include <nanobind/stl/pair.h>
#include <nanobind/stl/tuple.h>

#include <string>
#include <tuple>
#include <vector>

#include "common.hpp"
#include "communicator.hpp"
#include "gradcodec/comm/calibrate.hpp"
#include "gradcodec/comm/drift.hpp"
#include "gradcodec/comm/plan.hpp"

namespace gradcodec::python {

namespace {

gcc::calibrate_options options(const std::vector<nb::object>& specs, int threads,
                               std::uint64_t small, std::uint64_t large, double seconds,
                               std::uint64_t link_small, std::uint64_t link_large, int repeats,
                               std::uint64_t in_call, std::uint64_t in_call_segment,
                               int in_call_repeats) {
  gcc::calibrate_options opt;
  for (const nb::object& s : specs) opt.specs.push_back(spec_arg(s));
  opt.threads = threads;
  opt.small_elements = small;
  opt.large_elements = large;
  opt.seconds_per_point = seconds;
  opt.small_bytes = link_small;
  opt.large_bytes = link_large;
  opt.link_repeats = repeats;
  opt.in_call_elements = in_call;
  opt.in_call_segment = in_call_segment;
  opt.in_call_repeats = in_call_repeats;
  return opt;
}

nb::dict row_dict(const gcc::plan_row& r) {
  const gcc::candidate& c = r.config;
  nb::dict d;
  d["candidate"] = gcc::describe(c);
  d["uncompressed"] = c.uncompressed;
  d["spec"] = c.uncompressed ? std::string() : to_string(c.spec);
  d["strategy"] = c.uncompressed ? std::string() : std::string(gcc::strategy_name(c.how));
  d["segment"] = c.segment_elements;
  d["pipeline"] = c.pipeline;
  d["error_feedback"] = c.error_feedback;
  d["transport_allreduce"] = c.transport_allreduce;
  d["total_s"] = r.predicted.total_s;
  d["compute_s"] = r.predicted.compute_s;
  d["transfer_s"] = r.predicted.transfer_s;
  d["hidden_s"] = r.predicted.hidden_s;
  d["wire_bytes"] = r.predicted.wire_bytes;
  return d;
}

//! The candidate and prediction of a row_dict (what drift_tracker needs of it).
gcc::plan_row row_of(const nb::dict& d) {
  gcc::plan_row r;
  gcc::candidate& c = r.config;
  c.uncompressed = nb::cast<bool>(d["uncompressed"]);
  if (!c.uncompressed) {
    c.spec = spec_arg(d["spec"]);
    c.how = unwrap(gcc::strategy_from_name(nb::cast<std::string>(d["strategy"])));
  }
  c.segment_elements = nb::cast<std::uint64_t>(d["segment"]);
  c.pipeline = nb::cast<bool>(d["pipeline"]);
  c.error_feedback = nb::cast<bool>(d["error_feedback"]);
  c.transport_allreduce = nb::cast<bool>(d["transport_allreduce"]);
  r.predicted.total_s = nb::cast<double>(d["total_s"]);
  return r;
}

}  // namespace

void register_plan(nb::module_& m) {
  nb::class_<gcc::drift_tracker>(
      m, "DriftTracker",
      "Measured against predicted time per planned bucket, agreed across ranks "
      "(gradcodec/comm/drift.hpp, docs/planner.md \"Drift\").")
      .def(
          "__init__",
          [](gcc::drift_tracker* t, double ewma, double limit) {
            new (t) gcc::drift_tracker(gcc::drift_options{ewma, limit});
          },
          nb::arg("ewma") = 0.2, nb::arg("limit") = 1.25)
      .def(
          "observe",
          [](gcc::drift_tracker& t, std::uint64_t key, const nb::dict& row, double seconds) {
            t.observe(key, row_of(row), seconds);
          },
          nb::arg("key"), nb::arg("row"), nb::arg("seconds"),
          "One timed call (this rank's) of bucket `key`, planned as `row` (a plan() row).")
      .def(
          "restore",
          [](gcc::drift_tracker& t, std::uint64_t key, const nb::dict& row, double ratio,
             double seconds) { t.restore(key, row_of(row), ratio, seconds); },
          nb::arg("key"), nb::arg("row"), nb::arg("ratio"), nb::arg("seconds"),
          "Sets a bucket's running values (a checkpoint's).")
      .def("ratio", &gcc::drift_tracker::ratio, nb::arg("key"))
      .def("seconds", &gcc::drift_tracker::seconds, nb::arg("key"))
      .def_prop_ro("replans", &gcc::drift_tracker::replans)
      .def(
          "agree",
          [](gcc::drift_tracker& t, communicator_handle& c, const std::string& profile_json) {
            gcc::cost_profile p = unwrap(gcc::profile_from_json(profile_json));
            std::vector<std::uint64_t> keys;
            check(without_gil([&]() -> status {
              auto r = t.agree(*c.comm, p);
              if (!r.ok()) return r.error();
              keys = std::move(r.value());
              return {};
            }));
            return std::make_pair(keys, gcc::profile_to_json(p));
          },
          nb::arg("comm"), nb::arg("profile"),
          "Collective: (the buckets to plan again, the profile scaled for them as JSON).");
  m.def(
      "calibrate",
      [](communicator_handle& c, const std::vector<nb::object>& specs, int threads,
         std::uint64_t small, std::uint64_t large, double seconds, std::uint64_t link_small,
         std::uint64_t link_large, int repeats, std::uint64_t in_call,
         std::uint64_t in_call_segment, int in_call_repeats) {
        const gcc::calibrate_options opt =
            options(specs, threads, small, large, seconds, link_small, link_large, repeats, in_call,
                    in_call_segment, in_call_repeats);
        gcc::cost_profile p;
        check(without_gil([&]() -> status {
          auto r = gcc::calibrate(*c.comm, opt);
          if (!r.ok()) return r.error();
          p = std::move(r.value());
          return {};
        }));
        return gcc::profile_to_json(p);
      },
      nb::arg("comm"), nb::arg("specs"), nb::arg("threads") = 1,
      nb::arg("small") = std::uint64_t{1} << 16, nb::arg("large") = std::uint64_t{1} << 22,
      nb::arg("seconds") = 0.02, nb::arg("link_small") = 4096,
      nb::arg("link_large") = std::uint64_t{1} << 22, nb::arg("repeats") = 5,
      nb::arg("in_call") = std::uint64_t{1} << 22,
      nb::arg("in_call_segment") = std::uint64_t{1} << 20, nb::arg("in_call_repeats") = 2,
      "Collective: the cost profile (docs/planner.md) of every rank of `comm`, agreed (the "
      "slowest rank's), as its JSON text. bf16 is always measured.");
  m.def(
      "measure_codec_costs",
      [](const std::vector<nb::object>& specs, int threads, std::uint64_t small,
         std::uint64_t large, double seconds) {
        const gcc::calibrate_options opt = options(specs, threads, small, large, seconds, 4096,
                                                   std::uint64_t{1} << 22, 1, 0, 0, 0);
        gcc::cost_profile p;
        check(without_gil([&]() -> status {
          auto r = gcc::measure_compute(opt);
          if (!r.ok()) return r.error();
          p.compute = std::move(r.value());
          return {};
        }));
        return gcc::profile_to_json(p);
      },
      nb::arg("specs"), nb::arg("threads") = 1, nb::arg("small") = std::uint64_t{1} << 16,
      nb::arg("large") = std::uint64_t{1} << 22, nb::arg("seconds") = 0.02,
      "This process alone: a profile JSON with the codec costs and the default link.");
  m.def(
      "plan",
      [](const std::string& profile_json, std::uint64_t elements, int ranks,
         const std::vector<nb::object>& accept, const std::vector<std::uint64_t>& segments,
         double margin, bool try_pipelining, bool transport_allreduce,
         std::optional<bool> error_feedback,
         const std::vector<std::pair<std::string, std::string>>& exclude,
         const std::vector<std::tuple<std::uint64_t, std::uint64_t, std::uint64_t>>& tensors) {
        const gcc::cost_profile profile = unwrap(gcc::profile_from_json(profile_json));
        gcc::plan_request req;
        req.elements = elements;
        req.ranks = ranks;
        for (const nb::object& s : accept) req.accept.push_back(spec_arg(s));
        req.segments = segments;
        req.margin = margin;
        req.try_pipelining = try_pipelining;
        req.transport_allreduce = transport_allreduce;
        req.error_feedback = error_feedback;
        for (const auto& [codec, how] : exclude)
          req.excluded.emplace_back(unwrap(codec_from_name(codec)),
                                    unwrap(gcc::strategy_from_name(how)));
        for (const auto& [offset, n, rows] : tensors) req.tensors.push_back({offset, n, rows});
        const gcc::plan_result r = unwrap(gcc::plan(req, profile));
        nb::list rows;
        for (const gcc::plan_row& row : r.rows) rows.append(row_dict(row));
        nb::dict out;
        out["rows"] = rows;
        out["chosen"] = r.chosen;
        out["best_dense"] = r.best_dense;
        out["reason"] = r.reason;
        return out;
      },
      nb::arg("profile"), nb::arg("elements"), nb::arg("ranks"), nb::arg("accept"),
      nb::arg("segments") = std::vector<std::uint64_t>{0}, nb::arg("margin") = 0.05,
      nb::arg("try_pipelining") = false, nb::arg("transport_allreduce") = false,
      nb::arg("error_feedback") = nb::none(),
      nb::arg("exclude") = std::vector<std::pair<std::string, std::string>>{},
      nb::arg("tensors") = std::vector<std::tuple<std::uint64_t, std::uint64_t, std::uint64_t>>{},
      "Every candidate predicted (fastest first) and the choice (docs/planner.md): a dict "
      "with rows, chosen, best_dense and reason. tensors: (offset, n, rows) of the matrices "
      "PowerSGD factorises (empty: the bucket as one near-square matrix).");
}

}  // namespace gradcodec::python
