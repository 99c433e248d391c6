// SPDX-License-Identifier: Apache-2.0
//! @file
//! gradcodec bench: its options, and the host run over every size x target x codec. Each
//! codec is measured by the one harness (codec_measure.hpp) on the host's clock and memory
//! (host_measure.hpp), beside the baselines (baselines.hpp); --backend cuda runs the same
//! harness on a GPU (bench_cuda.cpp), --allreduce times collectives (cmd_bench_allreduce.cpp).
#include <algorithm>
#include <array>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "baselines.hpp"
#include "bench_allreduce.hpp"
#if GRADCODEC_TOOL_HAVE_CUDA
#include "bench_cuda.hpp"
#endif
#include "bench_common.hpp"
#include "bench_report.hpp"
#include "codec_calls.hpp"
#include "codec_measure.hpp"
#include "commands.hpp"
#include "error.hpp"
#include "host_measure.hpp"
#include "text.hpp"

namespace gradcodec::tool {
namespace {

constexpr std::array bench_options{
    option_spec{"sizes", "LIST",
                "element counts separated by ',' (N or 2^K; default 2^20,2^24,2^26)", false, false},
    option_spec{"codecs", "LIST",
                "codec specs separated by ',' (as in eval) or 'all' (default: every codec with its "
                "defaults); repeatable",
                false, true},
    option_spec{"backend", "LIST",
                "backends separated by ',': reference, cpu, auto (default cpu,reference; "
                "the reference is skipped above 2^24 unless named here), or cuda alone "
                "(device memory, CUDA-event timing)",
                false, false},
    option_spec{"gpu", "LIST",
                "with --backend cuda: GPU ordinals separated by ',' (default: every "
                "visible GPU)",
                false, false},
    option_spec{"isa", "LIST",
                "CPU ISAs separated by ',' (default: every supported one, scalar only up to 2^24)",
                false, false},
    option_spec{"threads", "LIST",
                "CPU backend thread counts separated by ',' (default 0 = library "
                "default)",
                false, false},
    option_spec{"repeat", "N", "timed runs at least (default 5; more for short operations)", false,
                false},
    option_spec{"json", "FILE", "also write every measurement as JSON to FILE", false, false},
    option_spec{"verify", "",
                "check every measured frame, decoded output and error-feedback step against the "
                "reference backend, bit for bit; a difference fails the run"},
    allreduce_flag,
    allreduce_strategies_option,
    allreduce_pipeline_option,
    allreduce_segment_option,
    allreduce_warmup_option,
    allreduce_ranks_per_node_option,
};

//! A host backend's target: the reference (isa "-"), or the CPU backend on one ISA with a
//! thread count (0 = the library default, shown as its count).
measure_target host_target(backend where, const std::string& isa, int threads) {
  measure_target t;
  t.opt.where = where;
  t.opt.threads = threads;
  t.backend = std::string(backend_name(where));
  t.isa = isa;
  t.threads = where == backend::reference ? 1 : (threads > 0 ? threads : cpu_default_threads());
  return t;
}

std::vector<backend> backends_from(const parsed_args& args, bool& reference_named) {
  std::vector<backend> out;
  reference_named = false;
  if (!args.has("backend")) {
    if (backend_available(backend::cpu)) out.push_back(backend::cpu);
    out.push_back(backend::reference);
    return out;
  }
  for (const auto& name : split_list("--backend", *args.get("backend"))) {
    auto b = backend_from_name(name);
    if (!b) usage_fail(std::string("--backend: ") + b.error().message());
    if (b.value() == backend::cuda) continue;  // run_bench handles cuda on its own
    if (!backend_available(b.value()))
      fail("backend '" + name +
           "' is not available: " + std::string(backend_unavailable_reason(b.value())));
    if (b.value() == backend::reference) reference_named = true;
    if (std::find(out.begin(), out.end(), b.value()) == out.end()) out.push_back(b.value());
  }
  return out;
}

std::vector<cpu_isa> isas_from(const parsed_args& args) {
  std::vector<cpu_isa> out;
  if (!args.has("isa")) {
    for (const cpu_isa i : {cpu_isa::scalar, cpu_isa::avx2, cpu_isa::avx512})
      if (cpu_isa_supported(i)) out.push_back(i);
    return out;
  }
  for (const auto& name : split_list("--isa", *args.get("isa"))) {
    auto i = cpu_isa_from_name(name);
    if (!i) usage_fail(std::string("--isa: ") + i.error().message());
    if (!cpu_isa_supported(i.value()))
      fail("--isa: '" + name + "' is not supported by this build or CPU");
    if (std::find(out.begin(), out.end(), i.value()) == out.end()) out.push_back(i.value());
  }
  return out;
}

//! --backend cuda: device buffers and CUDA-event timing (bench_cuda.cpp).
int run_bench_gpu(const parsed_args& args, const std::vector<std::uint64_t>& sizes,
                  const std::vector<codec_spec>& specs, std::uint64_t min_runs,
                  const std::optional<std::string>& json) {
  if (split_list("--backend", *args.get("backend")).size() != 1)
    usage_fail("--backend cuda runs on its own (device memory, CUDA-event timing)");
  if (args.has("isa") || args.has("threads")) usage_fail("--isa and --threads are CPU options");
#if GRADCODEC_TOOL_HAVE_CUDA
  if (!backend_available(backend::cuda)) fail("--backend cuda: no CUDA device is visible");
  cuda_bench_request req{sizes, specs, {}};
  if (args.has("gpu"))
    for (const auto& g : split_list("--gpu", *args.get("gpu")))
      req.gpus.push_back(static_cast<int>(parse_u64("--gpu", g)));
  run_state st;
  st.min_runs = std::max<std::uint64_t>(min_runs, 20);
  for (const auto& s : specs) st.out.width = std::max(st.out.width, to_string(s).size() + 2);
  std::cout << "gradcodec bench --backend cuda: f32 gradient-like data in device memory, median of "
            << st.min_runs << " CUDA-event timings after a warm-up, L2 flushed before each;\n"
            << "%memcpy against a device-to-device copy of the same size in this run\n";
  run_bench_cuda(req, st);
  finish_run(st, json);
  return 0;
#else
  static_cast<void>(sizes);
  static_cast<void>(specs);
  static_cast<void>(min_runs);
  static_cast<void>(json);
  fail("backend 'cuda' is not available: this gradcodec was built without CUDA");
#endif
}

}  // namespace

const command_spec bench_spec{
    "bench",
    "Benchmarks codecs, or compressed allreduce, on gradient-like data.",
    "",
    "Benchmarks codecs on gradient-like f32 data: for each size, codec, backend, CPU ISA and\n"
    "thread count, the median time of encode, decode, decode_accumulate and fused\n"
    "error-feedback encode (encode_ef); effective GB/s by the bytes model of\n"
    "docs/performance.md; that as a % of a memcpy measured in the same run; compression\n"
    "ratio (f32 bytes / frame bytes; for encode_ef the mean frame of its runs: the\n"
    "residual carries over between runs, so threshold's frames grow); relative L2 error\n"
    "of decode.",
    "Baselines, single-threaded, on the same data: memcpy and a read-only sum (the roofline),\n"
    "std::nth_element and binary-heap (BytePS) top-k at ratio 0.01, and a two-pass min-max\n"
    "4-bit quantizer with buckets of 512 (CGX). Each time is the median of at least --repeat\n"
    "runs after a warm-up (more runs, up to 100, while they total under 0.2 s).\n"
    "A codec a backend does not implement gets a row note, not a failure; other failures\n"
    "are noted in their row and make the exit status 1.\n\n"
    "With --allreduce (under mpirun) it times compressed allreduce over MPI instead, beside\n"
    "dense MPI_Allreduce in fp32 and bf16; docs/tool.md describes its defaults, table and\n"
    "JSON.\n\n"
    "examples:\n"
    "  gradcodec bench\n"
    "  gradcodec bench --sizes 2^20 --codecs topk:ratio=0.01,minmax:bits=4 --json out.json\n"
    "  mpirun -np 4 gradcodec bench --allreduce --sizes 2^24 --json allreduce.json\n",
    bench_options,
    0};

int run_bench(const parsed_args& args) {
  if (args.has("verify") && args.has("allreduce"))
    usage_fail("--verify checks codec calls; the allreduce strategies are checked by the tests");
  if (args.has("allreduce")) return run_bench_allreduce(args);
  std::vector<std::uint64_t> sizes;
  for (const auto& s : split_list("--sizes", args.get("sizes").value_or("2^20,2^24,2^26")))
    sizes.push_back(parse_size(s));
  const std::uint64_t min_runs = args.get_u64("repeat", 5);
  if (min_runs < 5) usage_fail("--repeat: must be at least 5");
  std::vector<codec_spec> specs;
  const std::vector<std::string> names =
      split_codecs(args.has("codecs") ? args.all("codecs") : std::vector<std::string>{"all"});
  for (const auto& n : names) {
    if (n != "all") {
      specs.push_back(spec_from_text("--codecs", n));
      continue;
    }
    for (const auto& c : all_codecs()) specs.push_back(make_spec(c.id));
  }
  std::vector<int> threads;
  for (const auto& t : split_list("--threads", args.get("threads").value_or("0"))) {
    const std::uint64_t v = parse_u64("--threads", t);
    if (v > 1024) usage_fail("--threads: '" + t + "' is above 1024");
    threads.push_back(static_cast<int>(v));
  }
  const auto json = args.get("json");
  if (args.has("backend")) {
    const auto named = split_list("--backend", *args.get("backend"));
    if (std::find(named.begin(), named.end(), "cuda") != named.end()) {
      if (args.has("verify"))
        usage_fail(
            "--verify: the CUDA backend is checked against the reference by "
            "scripts/gpu-check's tests");
      return run_bench_gpu(args, sizes, specs, min_runs, json);
    }
  }
  if (args.has("gpu")) usage_fail("--gpu: only with --backend cuda");
  bool reference_named = false;
  const std::vector<backend> backends = backends_from(args, reference_named);
  const std::vector<cpu_isa> isas = isas_from(args);

  std::vector<measure_target> targets;
  for (const backend b : backends) {
    if (b == backend::reference) {
      targets.push_back(host_target(b, "-", 0));
      continue;
    }
    for (const cpu_isa i : isas)
      for (const int t : threads)
        targets.push_back(host_target(b, std::string(cpu_isa_name(i)), t));
  }

  const cpu_isa initial_isa = cpu_isa_active();
  std::cout << "gradcodec bench: f32 gradient-like data, median of >= " << min_runs
            << " runs after a warm-up; GB/s by the bytes model (docs/performance.md);\n"
            << "%memcpy against the memcpy of the same size in this run. Library default "
               "threads: "
            << cpu_default_threads() << "\n";
  constexpr std::uint64_t slow_limit = std::uint64_t{1} << 24;
  run_state st;
  st.min_runs = min_runs;
  st.verify = args.has("verify");
  for (const auto& s : specs) st.out.width = std::max(st.out.width, to_string(s).size() + 2);
  for (const std::uint64_t n : sizes) {
    std::cout << "\nn = " << size_name(n) << " (" << n << " elements, "
              << strprintf("%.1f", 4.0 * static_cast<double>(n) / (1 << 20)) << " MiB)\n";
    host_memory mem(n);
    host_clock clock;
    st.out.header();
    run_baselines(st, mem);
    bool skipped_reference = false, skipped_scalar = false;
    for (const auto& t : targets) {
      if (t.opt.where == backend::reference && n > slow_limit && !reference_named) {
        skipped_reference = true;
        continue;
      }
      if (t.isa == "scalar" && n > slow_limit && !args.has("isa")) {
        skipped_scalar = true;
        continue;
      }
      if (t.opt.where != backend::reference) {
        auto i = cpu_isa_from_name(t.isa);
        if (!i || !set_cpu_isa(i.value()).ok()) fail("cannot select CPU ISA '" + t.isa + "'");
      }
      for (const auto& spec : specs) measure_codec(st, clock, mem, spec, t);
    }
    if (skipped_reference)
      std::cout << "(reference backend skipped above 2^24: slow; name it in --backend to "
                   "include it)\n";
    if (skipped_scalar)
      std::cout << "(scalar CPU ISA skipped above 2^24: slow; name it in --isa to include it)\n";
  }
  static_cast<void>(set_cpu_isa(initial_isa));
  if (st.verify)
    std::cout << "\nverify: " << st.verified
              << " measured configurations equal the reference backend bit for bit\n";
  finish_run(st, json);
  return 0;
}

}  // namespace gradcodec::tool
