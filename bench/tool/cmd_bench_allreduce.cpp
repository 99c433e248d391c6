// SPDX-License-Identifier: Apache-2.0
//! @file
//! gradcodec bench --allreduce: under mpirun, times gradcodec::comm::allreduce over MPI for
//! each size x codec x strategy the codec supports x pipelining off/on, as a real training
//! loop runs it (one caller-owned error-feedback state per configuration, carried across
//! the calls; the step advancing), beside a dense MPI_Allreduce of the same gradient in
//! fp32 and in bf16 (a user-defined MPI_Op summing bf16). Every time is the slowest rank's;
//! the pure transfer time of a configuration is measured by replaying its collectives, with
//! the same sizes and no computation, through a recording communicator.
#include <algorithm>
#include <array>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <iostream>
#include <iterator>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "bench_allreduce.hpp"
#include "bench_common.hpp"
#include "codec_calls.hpp"
#include "error.hpp"
#include "gradcodec/blocks/float16.hpp"
#include "gradcodec/comm/allreduce.hpp"
#include "gradcodec/comm/mpi.hpp"
#include "model_layout.hpp"
#include "mpi_session.hpp"
#include "recording_communicator.hpp"
#include "text.hpp"

namespace gradcodec::tool {
namespace {

using clock_type = std::chrono::steady_clock;

//! The default codec set: 4-bit quantizers, 1-2 bit codecs, sparsifiers at 1%, PowerSGD
//! rank 4, and the 16-bit casts.
constexpr std::array<const char*, 10> default_codecs{
    "minmax:bits=4",   "qsgd:levels=7",      "terngrad",        "onebit", "sign:scale=mean",
    "topk:ratio=0.01", "randomk:ratio=0.01", "powersgd:rank=4", "fp16",   "bf16"};

constexpr std::uint64_t largest_size = std::uint64_t{1} << 30;  // MPI int counts for the baselines

struct options {
  std::vector<std::uint64_t> sizes;
  std::vector<codec_spec> specs;
  std::vector<comm::strategy> strategies;  //!< empty: every strategy a codec supports
  std::vector<bool> pipelines;
  std::uint64_t segment = std::uint64_t{1} << 20;
  std::uint64_t iterations = 5;
  std::uint64_t warmup = 1;
  std::uint64_t ranks_per_node = 0;  //!< > 0: hierarchical calls over nodes of this many ranks
  int threads = 1;
  backend where = backend::automatic;
  std::optional<cpu_isa> isa;
  std::optional<std::string> json;
};

//! Everything is checked before MPI starts, identically on every rank.
options parse_options(const parsed_args& args) {
  options o;
  for (const auto& s : split_list("--sizes", args.get("sizes").value_or("2^22,2^24"))) {
    o.sizes.push_back(parse_size(s));
    if (o.sizes.back() > largest_size)
      usage_fail("--sizes: '" + s + "' is above 2^30 (the limit of --allreduce)");
  }
  const std::vector<std::string> names =
      args.has("codecs") ? split_codecs(args.all("codecs"))
                         : std::vector<std::string>(default_codecs.begin(), default_codecs.end());
  for (const auto& n : names) {
    if (n != "all") {
      o.specs.push_back(spec_from_text("--codecs", n));
      continue;
    }
    for (const auto& c : all_codecs()) o.specs.push_back(make_spec(c.id));
  }
  if (args.has("strategies"))
    for (const auto& s : split_list("--strategies", *args.get("strategies"))) {
      auto st = comm::strategy_from_name(s);
      if (!st) usage_fail(std::string("--strategies: ") + st.error().message());
      if (std::find(o.strategies.begin(), o.strategies.end(), st.value()) == o.strategies.end())
        o.strategies.push_back(st.value());
    }
  const std::string mode = args.get("pipeline").value_or("both");
  if (mode == "off") {
    o.pipelines = {false};
  } else if (mode == "on") {
    o.pipelines = {true};
  } else if (mode == "both") {
    o.pipelines = {false, true};
  } else {
    usage_fail("--pipeline: '" + mode + "' is not off, on or both");
  }
  if (args.has("segment")) {
    const std::string s = *args.get("segment");
    o.segment = s == "0" ? 0 : parse_size(s, "--segment");
  }
  o.iterations = args.get_u64("repeat", 5);
  if (o.iterations < 1) usage_fail("--repeat: must be at least 1");
  o.warmup = args.get_u64("warmup", 1);
  if (args.has("ranks-per-node")) {
    o.ranks_per_node = args.get_u64("ranks-per-node", 0);
    if (o.ranks_per_node < 1) usage_fail("--ranks-per-node: must be at least 1");
  }
  const std::uint64_t t = args.get_u64("threads", 1);
  if (t > 1024) usage_fail("--threads: '" + std::to_string(t) + "' is above 1024");
  o.threads = static_cast<int>(t);
  if (args.has("backend")) {
    auto b = backend_from_name(*args.get("backend"));
    if (!b) usage_fail(std::string("--backend: ") + b.error().message());
    if (b.value() == backend::cuda)
      usage_fail("--backend: the allreduce strategies run on host memory; cuda is refused");
    if (!backend_available(b.value()))
      fail("backend '" + *args.get("backend") + "' is not available in this gradcodec");
    o.where = b.value();
  }
  if (args.has("isa")) {
    auto i = cpu_isa_from_name(*args.get("isa"));
    if (!i) usage_fail(std::string("--isa: ") + i.error().message());
    if (!cpu_isa_supported(i.value()))
      fail("--isa: '" + *args.get("isa") + "' is not supported by this build or CPU");
    o.isa = i.value();
  }
  o.json = args.get("json");
  return o;
}

//! 4n / the frame bytes of the whole gradient (PowerSGD: the sum over its tensors).
double codec_ratio(const codec_spec& spec, std::uint64_t n,
                   std::span<const comm::tensor_slot> slots) {
  std::uint64_t frame = 0;
  if (spec.id == codec_id::powersgd) {
    for (const auto& s : slots) frame += encode_bound(spec, s.n, dtype::f32, s.rows);
  } else {
    frame = encode_bound(spec, n, dtype::f32, 0);
  }
  return frame > 0 ? 4.0 * static_cast<double>(n) / static_cast<double>(frame) : 0.0;
}

//! bf16 + bf16, summed in f32 and rounded to nearest even (the dense bf16 baseline's op).
void bf16_sum(void* in, void* inout, int* len, MPI_Datatype* /*type*/) {
  const auto* a = static_cast<const std::uint16_t*>(in);
  auto* b = static_cast<std::uint16_t*>(inout);
  for (int i = 0; i < *len; ++i)
    b[i] = blocks::f32_to_bf16(blocks::bf16_to_f32(a[i]) + blocks::bf16_to_f32(b[i]));
}

//! One row of the table and of the JSON.
struct row {
  std::string codec, strategy;
  bool pipeline = false;
  std::uint64_t n = 0, segment = 0, iterations = 0;
  double median_s = 0, min_s = 0, max_s = 0;
  double algbw = 0, busbw = 0;  // Gbit/s
  double bytes_sent = 0, bytes_received = 0, wire_bytes = 0, collectives = 0;
  double codec_ratio = 0, wire_ratio = 0, speedup_fp32 = 0, speedup_bf16 = 0;
  double transfer_s = NAN;
  double agree_s = 0, encode_s = 0, reduce_s = 0, decode_s = 0, comm_s = 0;
  double rel_error = NAN;
  std::string note;  //!< non-empty: not measured
};

//! ||a - ref|| / ||ref|| in double.
double rel_error(const std::vector<float>& a, const std::vector<float>& ref) {
  double e2 = 0, r2 = 0;
  for (std::size_t i = 0; i < ref.size(); ++i) {
    const double d = static_cast<double>(a[i]) - ref[i];
    e2 += d * d;
    r2 += static_cast<double>(ref[i]) * ref[i];
  }
  return r2 > 0 ? std::sqrt(e2 / r2) : (e2 > 0 ? INFINITY : 0.0);
}

class table {
 public:
  std::size_t width = 20;  //!< of the codec column

  void header() const {
    std::cout << pad("codec", width) << pad("strategy", 14) << pad("pipe", 5)
              << pad("median_ms", 10, true) << pad("algbw", 8, true) << pad("busbw", 8, true)
              << pad("wire_MiB", 10, true) << pad("ratio", 8, true) << pad("x_fp32", 8, true)
              << pad("x_bf16", 8, true) << pad("xfer_ms", 10, true) << pad("t/xfer", 7, true)
              << pad("enc_ms", 9, true) << pad("comm_ms", 9, true) << pad("rel_err", 10, true)
              << "\n";
  }
  void print(const row& r) const {
    std::cout << pad(r.codec, width) << pad(r.strategy, 14) << pad(r.pipeline ? "on" : "off", 5);
    if (!r.note.empty()) {
      std::cout << "  " << r.note << "\n" << std::flush;
      return;
    }
    const auto num = [](double v, const char* fmt, std::size_t w) {
      return pad(std::isfinite(v) ? strprintf(fmt, v) : "-", w, true);
    };
    // Milliseconds with three significant digits or more.
    const auto ms = [&num](double s, std::size_t w) {
      const double v = s * 1e3;
      return num(v, v < 1 ? "%.3f" : (v < 100 ? "%.2f" : "%.1f"), w);
    };
    std::cout << ms(r.median_s, 10) << num(r.algbw, "%.2f", 8) << num(r.busbw, "%.2f", 8)
              << num(r.wire_bytes / (1 << 20), "%.2f", 10) << num(r.codec_ratio, "%.1f", 8)
              << num(r.speedup_fp32, "%.2f", 8) << num(r.speedup_bf16, "%.2f", 8)
              << ms(r.transfer_s, 10) << num(r.median_s / r.transfer_s, "%.2f", 7)
              << ms(r.encode_s, 9) << ms(r.comm_s, 9) << num(r.rel_error, "%.2e", 10) << "\n"
              << std::flush;
  }
};

//! Runs `body` warmup + iterations times, each after a barrier, and keeps the slowest
//! rank's time of each timed call. A failure on any rank stops every rank (the outcome is
//! agreed after each call, outside the timed region).
template <class Body>
status timed_calls(MPI_Comm world, std::uint64_t warmup, std::uint64_t iterations,
                   std::vector<double>& times, Body&& body) {
  times.clear();
  for (std::uint64_t i = 0; i < warmup + iterations; ++i) {
    const bool timed = i >= warmup;
    MPI_Barrier(world);
    const auto t0 = clock_type::now();
    const status st = body(i, timed, i + 1 == warmup + iterations);
    std::array<double, 2> outcome{std::chrono::duration<double>(clock_type::now() - t0).count(),
                                  st.ok() ? 0.0 : 1.0};
    MPI_Allreduce(MPI_IN_PLACE, outcome.data(), 2, MPI_DOUBLE, MPI_MAX, world);
    if (outcome[1] != 0.0)
      return st.ok() ? status{status_code::comm_error, "another rank failed"} : st;
    if (timed) times.push_back(outcome[0]);
  }
  return {};
}

//! Fills the timing fields of a row from the slowest rank's times.
void set_times(row& r, const std::vector<double>& times, int world_size) {
  r.iterations = times.size();
  r.median_s = median(times);
  r.min_s = *std::min_element(times.begin(), times.end());
  r.max_s = *std::max_element(times.begin(), times.end());
  const double bytes = 4.0 * static_cast<double>(r.n);
  r.algbw = r.median_s > 0 ? bytes * 8.0 / r.median_s * 1e-9 : 0.0;
  r.busbw = world_size > 1 ? r.algbw * 2.0 * (world_size - 1) / world_size : 0.0;
}

//! Everything one size needs, allocated once.
struct size_buffers {
  std::vector<float> in, out, reference;
  std::vector<std::uint16_t> half_in, half_out;
};

class allreduce_bench {
 public:
  allreduce_bench(const options& o, comm::mpi_communicator& mpi)
      : o_(o), rec_(mpi), world_(mpi.handle()), size_(mpi.size()), me_(mpi.rank()) {
    MPI_Op_create(&bf16_sum, 1, &bf16_op_);
    for (const auto& s : o_.specs) out_.width = std::max(out_.width, to_string(s).size() + 2);
  }
  ~allreduce_bench() { MPI_Op_free(&bf16_op_); }
  allreduce_bench(const allreduce_bench&) = delete;
  allreduce_bench& operator=(const allreduce_bench&) = delete;

  //! Every measurement; returns the number that failed.
  std::size_t run() {
    if (o_.ranks_per_node > 0) {
      const auto per = static_cast<int>(o_.ranks_per_node);
      if (size_ % per != 0)
        fail("bench --allreduce: --ranks-per-node " + std::to_string(per) +
             " does not divide the " + std::to_string(size_) + " ranks");
      if (auto st = comm::make_hierarchy(rec_, me_ / per, nodes_); !st.ok())
        fail(describe("bench --allreduce: the node split", st));
    }
    if (me_ == 0) print_header();
    for (const std::uint64_t n : o_.sizes) run_size(n);
    return failed_;
  }

  void write_json(const std::string& path) const;

 private:
  void print_header() const {
    std::cout << "gradcodec bench --allreduce: " << size_ << " MPI rank(s), gradient-like f32 data "
              << "(different on every rank); backend " << backend_name(o_.where) << ", "
              << (o_.threads > 0 ? std::to_string(o_.threads) : std::string("default"))
              << " CPU thread(s) per rank; segments of "
              << (o_.segment == 0 ? std::string("the whole buffer")
                                  : size_name(o_.segment) + " elements")
              << ".\ntime: median over " << o_.iterations << " calls (after " << o_.warmup
              << " warm-up) of the slowest rank; algbw = 4n bytes / time, busbw = algbw * 2(W-1)/W "
                 "(nccl-tests), in Gbit/s;\nwire_MiB: bytes a rank sends to others per call "
                 "(largest rank); ratio: 4n / frame bytes; x_fp32, x_bf16: speedup over dense "
                 "MPI_Allreduce\nin fp32 and bf16; xfer_ms: the same collectives replayed without "
                 "computation; t/xfer = median_ms / xfer_ms.\n";
  }

  void emit(row r) {
    if (!r.note.empty() && r.note.rfind("error", 0) == 0) ++failed_;
    if (me_ == 0) out_.print(r);
    rows_.push_back(std::move(r));
  }

  //! The per-rank maxima of a list of values (collective).
  void max_over_ranks(std::span<double> v) const {
    MPI_Allreduce(MPI_IN_PLACE, v.data(), static_cast<int>(v.size()), MPI_DOUBLE, MPI_MAX, world_);
  }

  void run_size(std::uint64_t n);
  status dense_fp32(size_buffers& b, row& r);
  status dense_bf16(size_buffers& b, row& r);
  void run_strategies(size_buffers& b, const codec_spec& spec, comm::workspace& ws);
  void run_uncompressed_hierarchy(size_buffers& b, comm::workspace& ws);
  status time_allreduce(const comm::allreduce_config& cfg, size_buffers& b, comm::workspace& ws,
                        bool record_last, row& r, comm::phase_times& phases);
  void set_phases(row& r, const comm::phase_times& phases);

  const options& o_;
  recording_communicator rec_;
  comm::hierarchy nodes_;  //!< with --ranks-per-node: the calls' two levels
  MPI_Comm world_;
  int size_, me_;
  MPI_Op bf16_op_ = MPI_OP_NULL;
  table out_;
  std::vector<row> rows_;
  std::size_t failed_ = 0;
  double fp32_s_ = NAN, bf16_s_ = NAN;
};

void allreduce_bench::run_size(std::uint64_t n) {
  if (me_ == 0)
    std::cout << "\nn = " << size_name(n) << " (" << n << " f32 elements, "
              << strprintf("%.1f", 4.0 * static_cast<double>(n) / (1 << 20)) << " MiB) per rank, "
              << size_ << (size_ == 1 ? " rank\n" : " ranks\n");
  size_buffers b;
  b.in.resize(n);
  fill_gradient(b.in, static_cast<std::uint64_t>(me_) + 1);
  b.out.assign(n, 0.0f);
  b.reference.assign(n, 0.0f);
  b.half_in.assign(n, 0);
  b.half_out.assign(n, 0);
  if (me_ == 0) out_.header();

  const double ring = size_ > 1 ? 2.0 * (size_ - 1) / size_ : 0.0;
  const double dense_wire = ring * 4.0 * static_cast<double>(n);
  fp32_s_ = bf16_s_ = NAN;
  std::array<row, 2> dense;
  for (const bool half : {false, true}) {
    row& r = dense[half ? 1 : 0];
    r.codec = half ? "dense_bf16" : "dense_fp32";
    r.strategy = "mpi_allreduce";
    r.n = n;
    r.codec_ratio = half ? 2.0 : 1.0;
    r.wire_bytes = dense_wire / r.codec_ratio;
    r.bytes_sent = r.bytes_received = 4.0 * static_cast<double>(n) / r.codec_ratio;
    r.collectives = 1;
    r.wire_ratio = r.codec_ratio;
    const status st = half ? dense_bf16(b, r) : dense_fp32(b, r);
    if (!st.ok()) {
      r.note = "error: " + describe("MPI_Allreduce", st);
    } else {
      (half ? bf16_s_ : fp32_s_) = r.median_s;
      r.rel_error = half ? rel_error(b.out, b.reference) : 0.0;
    }
  }
  for (auto& r : dense) {
    if (r.note.empty()) {
      r.speedup_fp32 = fp32_s_ / r.median_s;
      r.speedup_bf16 = bf16_s_ / r.median_s;
    }
    emit(std::move(r));
  }

  comm::workspace ws;
  if (o_.ranks_per_node > 0) run_uncompressed_hierarchy(b, ws);
  for (const auto& spec : o_.specs) run_strategies(b, spec, ws);
}

//! Times `cfg` (over the node hierarchy with --ranks-per-node, else flat over the recording
//! communicator, recording the last call when asked) into r's times and `phases`.
status allreduce_bench::time_allreduce(const comm::allreduce_config& cfg, size_buffers& b,
                                       comm::workspace& ws, bool record_last, row& r,
                                       comm::phase_times& phases) {
  const std::uint64_t n = b.in.size();
  comm::allreduce_state state;  // carried across the calls, as in training
  const const_tensor_view in{b.in.data(), n, dtype::f32, 0};
  const tensor_view out{b.out.data(), n, dtype::f32, 0};
  std::vector<double> times;
  status st = timed_calls(
      world_, o_.warmup, o_.iterations, times, [&](std::uint64_t step, bool timed, bool last) {
        comm::phase_times t;
        if (last && record_last) rec_.start_recording();
        const context ctx{1, step, 0};
        const status s = o_.ranks_per_node > 0
                             ? comm::allreduce(nodes_, cfg, ctx, in, out, state, ws, &t)
                             : comm::allreduce(rec_, cfg, ctx, in, out, state, ws, &t);
        rec_.stop_recording();
        if (timed) phases += t;
        return s;
      });
  if (st.ok()) set_times(r, times, size_);
  return st;
}

//! The phase columns of r: per call, the largest over the ranks.
void allreduce_bench::set_phases(row& r, const comm::phase_times& phases) {
  const double k = 1.0 / static_cast<double>(r.iterations);
  std::array<double, 8> v{phases.agree_s * k,
                          phases.encode_s * k,
                          phases.reduce_s * k,
                          phases.decode_s * k,
                          phases.comm_s * k,
                          static_cast<double>(phases.bytes_sent) * k,
                          static_cast<double>(phases.bytes_received) * k,
                          static_cast<double>(phases.collectives) * k};
  max_over_ranks(v);
  r.agree_s = v[0];
  r.encode_s = v[1];
  r.reduce_s = v[2];
  r.decode_s = v[3];
  r.comm_s = v[4];
  r.bytes_sent = v[5];
  r.bytes_received = v[6];
  r.collectives = v[7];
}

//! With --ranks-per-node: the uncompressed f32 mean through the hierarchy (the planner's
//! uncompressed candidate there), beside the flat MPI_Allreduce baselines.
void allreduce_bench::run_uncompressed_hierarchy(size_buffers& b, comm::workspace& ws) {
  row r;
  r.codec = "uncompressed";
  r.strategy = "hierarchy";
  r.n = b.in.size();
  r.codec_ratio = 1.0;
  comm::allreduce_config cfg;
  cfg.uncompressed = true;
  cfg.where = o_.where;
  cfg.threads = o_.threads;
  comm::phase_times phases;
  if (status st = time_allreduce(cfg, b, ws, false, r, phases); !st.ok()) {
    r.note = "error: " + describe("allreduce", st);
    emit(std::move(r));
    return;
  }
  set_phases(r, phases);
  r.speedup_fp32 = fp32_s_ / r.median_s;
  r.speedup_bf16 = bf16_s_ / r.median_s;
  r.rel_error = rel_error(b.out, b.reference);
  emit(std::move(r));
}

status allreduce_bench::dense_fp32(size_buffers& b, row& r) {
  const int count = static_cast<int>(r.n);
  const float alpha = 1.0f / static_cast<float>(size_);
  std::vector<double> times;
  auto st = timed_calls(world_, o_.warmup, o_.iterations, times, [&](std::uint64_t, bool, bool) {
    const int rc = MPI_Allreduce(b.in.data(), b.out.data(), count, MPI_FLOAT, MPI_SUM, world_);
    if (rc != MPI_SUCCESS) return status{status_code::comm_error, "MPI_Allreduce (f32) failed"};
    for (float& v : b.out) v *= alpha;
    return status{};
  });
  if (!st.ok()) return st;
  set_times(r, times, size_);
  b.reference = b.out;
  return {};
}

status allreduce_bench::dense_bf16(size_buffers& b, row& r) {
  const int count = static_cast<int>(r.n);
  const float alpha = 1.0f / static_cast<float>(size_);
  std::vector<double> times;
  auto st = timed_calls(world_, o_.warmup, o_.iterations, times, [&](std::uint64_t, bool, bool) {
    for (std::size_t i = 0; i < b.in.size(); ++i) b.half_in[i] = blocks::f32_to_bf16(b.in[i]);
    const int rc =
        MPI_Allreduce(b.half_in.data(), b.half_out.data(), count, MPI_UINT16_T, bf16_op_, world_);
    if (rc != MPI_SUCCESS) return status{status_code::comm_error, "MPI_Allreduce (bf16) failed"};
    for (std::size_t i = 0; i < b.out.size(); ++i)
      b.out[i] = blocks::bf16_to_f32(b.half_out[i]) * alpha;
    return status{};
  });
  if (!st.ok()) return st;
  set_times(r, times, size_);
  return {};
}

//! One codec through every strategy it supports that was asked for, each with and without
//! pipelining: the timed allreduce, its phases, and a replay of its collectives alone.
void allreduce_bench::run_strategies(size_buffers& b, const codec_spec& spec, comm::workspace& ws) {
  const std::uint64_t n = b.in.size();
  const std::vector<comm::tensor_slot> slots =
      spec.id == codec_id::powersgd ? model_layout(n) : std::vector<comm::tensor_slot>{};
  const double ratio = codec_ratio(spec, n, slots);
  const comm::strategy_set have = comm::supported_strategies(spec.id);
  std::vector<comm::strategy> strategies;
  for (const comm::strategy s : {comm::strategy::allgather, comm::strategy::two_phase,
                                 comm::strategy::dense, comm::strategy::majority_vote}) {
    if (!have.contains(s)) continue;
    const bool asked =
        o_.strategies.empty() ||
        std::find(o_.strategies.begin(), o_.strategies.end(), s) != o_.strategies.end() ||
        (s == comm::preferred_strategy(spec.id) &&
         std::find(o_.strategies.begin(), o_.strategies.end(), comm::strategy::automatic) !=
             o_.strategies.end());
    if (asked) strategies.push_back(s);
  }
  const double ring = size_ > 1 ? 2.0 * (size_ - 1) / size_ : 0.0;
  const double dense_wire = ring * 4.0 * static_cast<double>(n);
  const std::string name = to_string(spec);

  for (const comm::strategy how : strategies) {
    double transfer_s = NAN, wire = 0;  // measured once per strategy (the same collectives)
    for (const bool pipeline : o_.pipelines) {
      row r;
      r.codec = name;
      r.strategy = std::string(comm::strategy_name(how));
      r.pipeline = pipeline;
      r.n = n;
      r.codec_ratio = ratio;
      r.segment = spec.id == codec_id::powersgd ? 0 : o_.segment;
      if (pipeline && spec.id == codec_id::powersgd && how == comm::strategy::dense) {
        r.note = "not pipelined (dense PowerSGD runs one P and one Q reduction per call)";
        emit(std::move(r));
        continue;
      }
      comm::allreduce_config cfg;
      cfg.spec = spec;
      cfg.how = how;
      cfg.segment_elements = o_.segment;
      cfg.pipeline = pipeline;
      cfg.where = o_.where;
      cfg.threads = o_.threads;
      cfg.tensors = slots;
      comm::phase_times phases;
      // The hierarchy's collectives run on split communicators: no replay of them.
      const bool measure_transfer = std::isnan(transfer_s) && o_.ranks_per_node == 0;
      if (status st = time_allreduce(cfg, b, ws, measure_transfer, r, phases); !st.ok()) {
        r.note = "error: " + describe("allreduce", st);
        emit(std::move(r));
        continue;
      }
      if (measure_transfer) {
        // The recorded collectives of the last call, blocking, back to back: one untimed
        // replay, then the median of up to three.
        const std::vector<collective_call> calls(rec_.calls().begin(), rec_.calls().end());
        std::array<double, 1> w{static_cast<double>(wire_bytes(calls, me_, size_))};
        max_over_ranks(w);
        wire = w[0];
        std::vector<double> replays;
        const status st =
            timed_calls(world_, 1, std::min<std::uint64_t>(o_.iterations, 3), replays,
                        [&](std::uint64_t, bool, bool) { return rec_.replay(calls); });
        if (!st.ok()) {
          r.note = "error: " + describe("replay", st);
          emit(std::move(r));
          continue;
        }
        transfer_s = median(replays);
      }
      set_phases(r, phases);
      r.transfer_s = transfer_s;
      // Hierarchical: what the library counted (the leaders send the most).
      r.wire_bytes = o_.ranks_per_node > 0 ? r.bytes_sent : wire;
      r.wire_ratio = r.wire_bytes > 0 ? dense_wire / r.wire_bytes : 0.0;
      r.speedup_fp32 = fp32_s_ / r.median_s;
      r.speedup_bf16 = bf16_s_ / r.median_s;
      r.rel_error = rel_error(b.out, b.reference);
      emit(std::move(r));
    }
  }
}

void allreduce_bench::write_json(const std::string& path) const {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  if (!f) fail("cannot open '" + path + "' for writing");
  f << "{\n  \"tool\": \"gradcodec bench --allreduce\",\n  \"ranks\": " << size_
    << ",\n  \"iterations\": " << o_.iterations << ",\n  \"warmup\": " << o_.warmup
    << ",\n  \"ranks_per_node\": " << o_.ranks_per_node
    << ",\n  \"segment_elements\": " << o_.segment << ",\n  \"threads\": " << o_.threads
    << ",\n  \"backend\": " << json_string(std::string(backend_name(o_.where)))
    << ",\n  \"records\": [";
  bool first = true;
  for (const auto& r : rows_) {
    if (!r.note.empty()) continue;
    f << (first ? "\n" : ",\n") << "    {\"codec\": " << json_string(r.codec)
      << ", \"strategy\": " << json_string(r.strategy)
      << ", \"pipeline\": " << (r.pipeline ? "true" : "false") << ", \"ranks\": " << size_
      << ", \"n\": " << r.n << ", \"bytes\": " << 4 * r.n << ", \"segment_elements\": " << r.segment
      << ", \"iterations\": " << r.iterations << ", \"median_s\": " << json_number(r.median_s)
      << ", \"min_s\": " << json_number(r.min_s) << ", \"max_s\": " << json_number(r.max_s)
      << ", \"algbw_gbit_s\": " << json_number(r.algbw)
      << ", \"busbw_gbit_s\": " << json_number(r.busbw)
      << ", \"bytes_sent\": " << json_number(r.bytes_sent)
      << ", \"bytes_received\": " << json_number(r.bytes_received)
      << ", \"wire_bytes\": " << json_number(r.wire_bytes)
      << ", \"collectives\": " << json_number(r.collectives)
      << ", \"codec_ratio\": " << json_number(r.codec_ratio)
      << ", \"wire_ratio\": " << json_number(r.wire_ratio)
      << ", \"speedup_fp32\": " << json_number(r.speedup_fp32)
      << ", \"speedup_bf16\": " << json_number(r.speedup_bf16)
      << ", \"transfer_s\": " << json_number(r.transfer_s)
      << ", \"time_over_transfer\": " << json_number(r.median_s / r.transfer_s)
      << ", \"agree_s\": " << json_number(r.agree_s)
      << ", \"encode_s\": " << json_number(r.encode_s)
      << ", \"reduce_s\": " << json_number(r.reduce_s)
      << ", \"decode_s\": " << json_number(r.decode_s) << ", \"comm_s\": " << json_number(r.comm_s)
      << ", \"rel_error\": " << json_number(r.rel_error) << "}";
    first = false;
  }
  f << "\n  ],\n  \"notes\": [";
  first = true;
  for (const auto& r : rows_) {
    if (r.note.empty()) continue;
    f << (first ? "\n" : ",\n") << "    {\"codec\": " << json_string(r.codec)
      << ", \"strategy\": " << json_string(r.strategy)
      << ", \"pipeline\": " << (r.pipeline ? "true" : "false") << ", \"n\": " << r.n
      << ", \"note\": " << json_string(r.note) << "}";
    first = false;
  }
  f << "\n  ]\n}\n";
  f.flush();
  if (!f) fail("cannot write '" + path + "'");
}

}  // namespace

int run_bench_allreduce(const parsed_args& args) {
  const options o = parse_options(args);
  mpi_session session("bench --allreduce");
  std::unique_ptr<comm::mpi_communicator> mpi;
  if (auto st = comm::mpi_communicator::create(MPI_COMM_WORLD, mpi); !st.ok())
    fail(describe("bench --allreduce", st));
  if (o.isa && !set_cpu_isa(*o.isa).ok()) fail("cannot select the CPU ISA");
  const int me = mpi->rank();
  std::size_t failed = 0;
  {
    allreduce_bench bench(o, *mpi);
    failed = bench.run();
    if (me == 0 && o.json) {
      bench.write_json(*o.json);
      std::cout << "\nwrote " << *o.json << "\n";
    }
  }
  mpi.reset();
  // Every rank knows the count; only rank 0 reports it.
  if (failed > 0) {
    if (me != 0) return exit_failure;
    fail(std::to_string(failed) + " measurement" + (failed > 1 ? "s" : "") +
         " failed (see the table)");
  }
  return 0;
}

}  // namespace gradcodec::tool
