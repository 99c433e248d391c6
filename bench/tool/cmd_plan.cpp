// SPDX-License-Identifier: Apache-2.0
//! @file
//! gradcodec plan: the cost model's prediction for every candidate configuration of one
//! bucket (comm/plan.hpp), and the choice, from a calibrated profile or from a link given
//! by its rate and latency with the codec costs measured here.
#include <array>
#include <chrono>
#include <cmath>
#include <fstream>
#include <iostream>
#include <sstream>

#include "bench_common.hpp"
#include "codec_calls.hpp"
#include "commands.hpp"
#include "error.hpp"
#include "gradcodec/comm/calibrate.hpp"
#include "gradcodec/comm/plan.hpp"
#include "model_layout.hpp"
#include "text.hpp"

namespace gradcodec::tool {
namespace {

constexpr std::array plan_options{
    option_spec{"size", "N", "elements of the bucket (f32), N or 2^K", true},
    option_spec{"ranks", "W", "ranks of the allreduce (default 2)"},
    option_spec{"profile", "FILE", "a profile from gradcodec calibrate (codec costs and link)"},
    option_spec{"bandwidth", "RATE",
                "the link per rank and direction: 100mbit, 1gbit, 10gbit, or bytes/s (overrides "
                "the profile's link)"},
    option_spec{"latency", "T", "with --bandwidth: per round, 50us, 1ms or seconds (default 50us)"},
    option_spec{"overlap", "X",
                "with --bandwidth: the fraction pipelining hides, 0..1 (default 0)"},
    option_spec{"burst", "BYTES",
                "with --bandwidth: bytes a rank sends at once after computing (a shaper's "
                "bucket; default 0)"},
    option_spec{"ranks-per-node", "P",
                "hierarchical calls (allreduce(hierarchy, ...)): nodes of P ranks, the link "
                "above between their leaders; needs the profile's intra_link or "
                "--intra-bandwidth"},
    option_spec{"intra-bandwidth", "RATE",
                "with --ranks-per-node: the link within a node (overrides the profile's)"},
    option_spec{"intra-latency", "T", "with --intra-bandwidth: per round (default 5us)"},
    option_spec{"codecs", "LIST",
                "the codecs you accept, separated by ',' (default: minmax 4-bit, qsgd, terngrad, "
                "onebit, scaled sign, topk, randomk, powersgd rank 4, fp16); uncompressed and "
                "bf16 are always candidates",
                false, true},
    option_spec{"segments", "LIST", "segment lengths to try (default 0,2^18,2^20,2^22; 0 = one)"},
    option_spec{"tensors", "LIST",
                "the bucket's matrices PowerSGD factorises, back to back from element 0: "
                "ROWSxCOLS,... (the rest a vector), or 'model' (the layout of gradcodec bench "
                "--allreduce); default: the bucket as one near-square matrix"},
    option_spec{"margin", "X",
                "how much faster a codec must be predicted than dense (default 0.05)"},
    option_spec{"core-share", "X",
                "the share of a core each rank gets, 0..1 (divides the measured codec speeds; "
                "default 1)"},
    option_spec{"threads", "N", "CPU threads per call when measuring here (default 1)"},
    option_spec{"all", "", "print every candidate (default: the fastest 12 and the dense ones)"},
    option_spec{"json", "", "print JSON instead of the table"},
    backend_option,
};

//! A number with an optional unit suffix; `units` lists (suffix, factor).
double parse_quantity(const std::string& what, const std::string& text,
                      std::initializer_list<std::pair<const char*, double>> units) {
  std::size_t used = 0;
  double v = 0;
  try {
    v = std::stod(text, &used);
  } catch (const std::exception&) {
    usage_fail(what + ": '" + text + "' is not a number");
  }
  const std::string unit = text.substr(used);
  double factor = unit.empty() ? 1.0 : 0.0;
  for (const auto& [name, f] : units)
    if (unit == name) factor = f;
  if (factor == 0) usage_fail(what + ": unknown unit '" + unit + "' in '" + text + "'");
  v *= factor;
  if (!(v >= 0) || !std::isfinite(v)) usage_fail(what + ": '" + text + "' is out of range");
  return v;
}

double parse_fraction(const std::string& what, const std::string& text) {
  const double v = parse_quantity(what, text, {});
  if (v > 1) usage_fail(what + ": '" + text + "' is not in 0..1");
  return v;
}

double parse_rate(const std::string& what, const std::string& text) {
  const double bytes_per_s = parse_quantity(
      what, text, {{"kbit", 1e3 / 8}, {"mbit", 1e6 / 8}, {"gbit", 1e9 / 8}, {"B/s", 1}});
  if (bytes_per_s <= 0) usage_fail(what + " must be above 0");
  return bytes_per_s;
}

double parse_latency(const std::string& what, const std::string& text) {
  return parse_quantity(what, text, {{"us", 1e-6}, {"ms", 1e-3}, {"s", 1}});
}

//! --tensors: 'model', or ROWSxCOLS,... placed back to back from element 0.
std::vector<comm::tensor_slot> parse_tensors(const std::string& text, std::uint64_t n) {
  if (text == "model") return model_layout(n);
  std::vector<comm::tensor_slot> out;
  std::uint64_t at = 0;
  for (const std::string& item : split_list("--tensors", text)) {
    const std::size_t x = item.find('x');
    if (x == std::string::npos) usage_fail("--tensors: '" + item + "' is not ROWSxCOLS");
    const std::uint64_t rows = parse_size(item.substr(0, x), "--tensors");
    const std::uint64_t cols = parse_size(item.substr(x + 1), "--tensors");
    if (rows == 0 || cols == 0) usage_fail("--tensors: '" + item + "' has a zero side");
    out.push_back({at, rows * cols, rows});
    at += rows * cols;
  }
  if (at > n) usage_fail("--tensors: the matrices hold more than --size elements");
  return out;
}

comm::cost_profile profile_from_args(const parsed_args& args,
                                     const std::vector<codec_spec>& specs) {
  comm::cost_profile p;
  if (auto file = args.get("profile")) {
    std::ifstream in(*file);
    if (!in) fail("cannot read '" + *file + "'");
    std::stringstream text;
    text << in.rdbuf();
    auto parsed = comm::profile_from_json(text.str());
    if (!parsed.ok()) fail(describe(*file, parsed.error()));
    p = parsed.value();
  } else if (!args.has("bandwidth")) {
    usage_fail("give --profile (from gradcodec calibrate) or --bandwidth");
  } else {
    comm::calibrate_options opt;
    opt.specs = specs;
    opt.threads = static_cast<int>(args.get_u64("threads", 1));
    std::cerr << "measuring the codec costs on this machine (one rank alone)...\n";
    auto measured = comm::measure_compute(opt);
    if (!measured.ok()) fail(describe("plan", measured.error()));
    p.compute = measured.value();
  }
  if (auto rate = args.get("bandwidth")) {
    const double bytes_per_s = parse_rate("--bandwidth", *rate);
    const double latency = parse_latency("--latency", args.get("latency").value_or("50us"));
    const double overlap = parse_fraction("--overlap", args.get("overlap").value_or("0"));
    const double burst = parse_quantity("--burst", args.get("burst").value_or("0"), {});
    p.link = comm::link_profile::uniform(latency, bytes_per_s, overlap, burst);
  }
  if (auto rate = args.get("intra-bandwidth"))
    p.intra = comm::link_profile::uniform(
        parse_latency("--intra-latency", args.get("intra-latency").value_or("5us")),
        parse_rate("--intra-bandwidth", *rate));
  if (auto share = args.get("core-share")) {
    const double s = parse_fraction("--core-share", *share);
    if (s <= 0) usage_fail("--core-share must be above 0");
    const auto scale = [&](comm::op_cost& c) {
      c.fixed_s /= s;
      c.per_element_s /= s;
    };
    scale(p.compute.copy);
    for (comm::codec_costs& c : p.compute.codecs)
      for (comm::op_cost* o : {&c.encode, &c.encode_with_feedback, &c.decode, &c.decode_accumulate})
        scale(*o);
  }
  return p;
}

void print_json(const comm::plan_request& req, const comm::plan_result& r) {
  std::cout << "{\"tool\": \"gradcodec plan\", \"elements\": " << req.elements
            << ", \"ranks\": " << req.ranks << ", \"chosen\": " << r.chosen
            << ", \"best_dense\": " << r.best_dense << ", \"reason\": " << json_string(r.reason)
            << ",\n \"rows\": [";
  for (std::size_t i = 0; i < r.rows.size(); ++i) {
    const comm::candidate& c = r.rows[i].config;
    const comm::prediction& p = r.rows[i].predicted;
    std::cout << (i == 0 ? "\n" : ",\n") << "  {\"candidate\": " << json_string(comm::describe(c))
              << ", \"uncompressed\": " << (c.uncompressed ? "true" : "false")
              << ", \"spec\": " << json_string(c.uncompressed ? "" : to_string(c.spec))
              << ", \"strategy\": "
              << json_string(c.uncompressed ? "" : std::string(comm::strategy_name(c.how)))
              << ", \"segment\": " << c.segment_elements
              << ", \"pipeline\": " << (c.pipeline ? "true" : "false")
              << ", \"error_feedback\": " << (c.error_feedback ? "true" : "false")
              << ", \"total_s\": " << json_number(p.total_s)
              << ", \"compute_s\": " << json_number(p.compute_s)
              << ", \"transfer_s\": " << json_number(p.transfer_s)
              << ", \"hidden_s\": " << json_number(p.hidden_s)
              << ", \"wire_bytes\": " << p.wire_bytes << ", \"collectives\": " << p.collectives
              << "}";
  }
  std::cout << "\n ]}\n";
}

void print_table(const comm::plan_request& req, const comm::plan_result& r, bool all) {
  std::cout << "bucket " << size_name(req.elements) << " f32 elements ("
            << strprintf("%.1f", static_cast<double>(req.elements) * 4 / (1 << 20)) << " MiB), "
            << req.ranks << " ranks"
            << (req.nodes ? strprintf(" (%d nodes of %d, hierarchical)", req.nodes->nodes,
                                      req.nodes->per_node)
                          : std::string())
            << ": " << r.rows.size() << " candidates\n\n";
  std::cout << pad("", 2) << pad("predicted ms", 13, true) << pad("compute", 9, true)
            << pad("transfer", 9, true) << pad("hidden", 8, true) << pad("wire MiB", 10, true)
            << "  candidate\n";
  for (std::size_t i = 0; i < r.rows.size(); ++i) {
    const comm::candidate& c = r.rows[i].config;
    if (!all && i >= 12 && i != r.chosen && !comm::is_dense(c)) continue;
    const comm::prediction& p = r.rows[i].predicted;
    std::cout << pad(i == r.chosen ? "*" : "", 2)
              << pad(strprintf("%.3f", p.total_s * 1e3), 13, true)
              << pad(strprintf("%.3f", p.compute_s * 1e3), 9, true)
              << pad(strprintf("%.3f", p.transfer_s * 1e3), 9, true)
              << pad(strprintf("%.3f", p.hidden_s * 1e3), 8, true)
              << pad(strprintf("%.3f", static_cast<double>(p.wire_bytes) / (1 << 20)), 10, true)
              << "  " << comm::describe(c) << "\n";
  }
  std::cout << "\nchosen: " << r.reason << "\n";
}

}  // namespace

const command_spec plan_spec{
    "plan",
    "Predicts every allreduce candidate's time and picks the fastest.",
    "",
    "Predicts the time of one compressed allreduce call for every candidate (uncompressed,\n"
    "bf16, and each accepted codec with each strategy it supports, segment length and\n"
    "pipelining) with the cost model of docs/planner.md, and prints the choice: the fastest,\n"
    "unless no codec beats the best dense candidate by --margin.",
    "examples:\n"
    "  gradcodec plan --size 2^24 --ranks 4 --bandwidth 1gbit\n"
    "  mpirun -np 4 gradcodec calibrate --out profile.json\n"
    "  gradcodec plan --size 2^24 --ranks 4 --profile profile.json --json\n"
    "  gradcodec plan --size 2^24 --ranks 16 --ranks-per-node 8 --bandwidth 10gbit \\\n"
    "      --intra-bandwidth 100gbit\n",
    plan_options,
    0};

int run_plan(const parsed_args& args) {
  comm::plan_request req;
  req.elements = parse_size(args.get("size").value(), "--size");
  const std::uint64_t ranks = args.get_u64("ranks", 2);
  if (ranks < 1 || ranks > 65536) usage_fail("--ranks must be in 1..65536");
  req.ranks = static_cast<int>(ranks);
  const std::vector<std::string> names = args.has("codecs")
                                             ? split_codecs(args.all("codecs"))
                                             : split_list("--codecs", planner_default_codecs);
  for (const std::string& n : names) req.accept.push_back(spec_from_text("--codecs", n));
  if (auto segs = args.get("segments")) {
    req.segments.clear();
    for (const std::string& s : split_list("--segments", *segs))
      req.segments.push_back(s == "0" ? 0 : parse_size(s, "--segments"));
  }
  if (auto t = args.get("tensors")) req.tensors = parse_tensors(*t, req.elements);
  if (args.has("ranks-per-node")) {
    const std::uint64_t per_node = args.get_u64("ranks-per-node", 1);
    if (per_node < 1 || ranks % per_node != 0)
      usage_fail("--ranks-per-node must be at least 1 and divide --ranks");
    req.nodes = comm::node_layout{static_cast<int>(ranks / per_node), static_cast<int>(per_node)};
  } else if (args.has("intra-bandwidth")) {
    usage_fail("--intra-bandwidth needs --ranks-per-node");
  }
  if (auto m = args.get("margin")) req.margin = parse_fraction("--margin", *m);
  if (req.margin >= 1) usage_fail("--margin must be below 1");

  const comm::cost_profile profile = profile_from_args(args, req.accept);
  const auto t0 = std::chrono::steady_clock::now();
  auto planned = comm::plan(req, profile);
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (!planned.ok()) fail(describe("plan", planned.error()));
  if (args.has("json")) {
    print_json(req, planned.value());
  } else {
    print_table(req, planned.value(), args.has("all"));
    std::cout << "(the plan took " << strprintf("%.3f", took * 1e3) << " ms)\n";
  }
  return 0;
}

}  // namespace gradcodec::tool
