// SPDX-License-Identifier: Apache-2.0
//! @file
//! gradcodec calibrate: measures a cost profile (comm/calibrate.hpp): the codec costs on
//! every rank at once, the link between the ranks when run under mpirun, every value
//! agreed across ranks; rank 0 writes the JSON that `gradcodec plan --profile` reads.
#include <array>
#include <fstream>
#include <iostream>
#include <memory>

#include "bench_common.hpp"
#include "codec_calls.hpp"
#include "commands.hpp"
#include "error.hpp"
#include "gradcodec/comm/calibrate.hpp"
#include "gradcodec/comm/thread_communicator.hpp"
#if GRADCODEC_TOOL_HAVE_MPI
#include "gradcodec/comm/mpi.hpp"
#include "mpi_session.hpp"
#endif

namespace gradcodec::tool {
namespace {

constexpr std::array calibrate_options_spec{
    option_spec{"codecs", "LIST",
                "codec specs to measure, separated by ',' (default: the set gradcodec plan "
                "accepts by default); bf16 is always added",
                false, true},
    option_spec{"out", "FILE", "write the profile here (rank 0; default: print it)"},
    option_spec{"threads", "N", "CPU threads per codec call (default 1)"},
    option_spec{"small", "N", "the smaller element count timed (default 2^16)"},
    option_spec{"large", "N", "the larger element count timed (default 2^22)"},
    option_spec{"link-small", "BYTES", "the smaller block of the link probe (default 4096)"},
    option_spec{"link-large", "BYTES", "the larger block of the link probe (default 2^22)"},
    option_spec{"repeats", "N", "timed calls per collective and size (default 5)"},
    option_spec{"in-call", "N",
                "elements of the allreduce calls that measure each codec and strategy in "
                "place (default 2^22)"},
    option_spec{"in-call-segment", "N", "their segment length (default 2^20)"},
    option_spec{"in-call-repeats", "N", "timed calls of each (default 2; 0: none)"},
    option_spec{"ranks-per-node", "N",
                "under mpirun: nodes of N consecutive ranks (a hierarchy, docs/comm.md §9); the "
                "profile then holds the link within a node (intra_link) and the link between "
                "the nodes' leaders"},
};

//! Flat, or over a hierarchy of nodes of `per_node` consecutive ranks (0: flat).
result<comm::cost_profile> measure(comm::communicator& c, const comm::calibrate_options& opt,
                                   std::uint64_t per_node) {
  if (per_node == 0) return comm::calibrate(c, opt);
  comm::hierarchy h;
  if (status s = comm::make_hierarchy(c, static_cast<int>(c.rank() / per_node), h); !s.ok())
    return s;
  return comm::calibrate(h, opt);
}

}  // namespace

const command_spec calibrate_spec{
    "calibrate",
    "Measures the cost model's profile that plan reads (links too under mpirun).",
    "",
    "Measures the cost model's profile (docs/planner.md): encode, encode with feedback,\n"
    "decode and decode-accumulate of every codec at two sizes on every rank at once, and,\n"
    "under mpirun, allgather, alltoall and allreduce at two block sizes, the burst and the\n"
    "overlap of a transfer with computation, then every codec and strategy in real calls\n"
    "(their compute and transfer against the model's). Every value is the median over the\n"
    "ranks, so every rank plans the same. Without mpirun (or without MPI in this build)\n"
    "the link is not measured: give it to gradcodec plan with --bandwidth.",
    "examples:\n"
    "  gradcodec calibrate --out here.json\n"
    "  mpirun -np 4 gradcodec calibrate --codecs minmax:bits=4,topk --out profile.json\n"
    "  mpirun -np 8 gradcodec calibrate --ranks-per-node 4 --out two_level.json\n",
    calibrate_options_spec,
    0};

int run_calibrate(const parsed_args& args) {
  comm::calibrate_options opt;
  const std::vector<std::string> names = args.has("codecs")
                                             ? split_codecs(args.all("codecs"))
                                             : split_list("--codecs", planner_default_codecs);
  for (const std::string& n : names) opt.specs.push_back(spec_from_text("--codecs", n));
  opt.threads = static_cast<int>(args.get_u64("threads", 1));
  if (auto s = args.get("small")) opt.small_elements = parse_size(*s, "--small");
  if (auto s = args.get("large")) opt.large_elements = parse_size(*s, "--large");
  if (opt.large_elements <= opt.small_elements) usage_fail("--large must be above --small");
  if (auto s = args.get("link-small")) opt.small_bytes = parse_size(*s, "--link-small");
  if (auto s = args.get("link-large")) opt.large_bytes = parse_size(*s, "--link-large");
  if (opt.large_bytes <= opt.small_bytes) usage_fail("--link-large must be above --link-small");
  opt.link_repeats = static_cast<int>(args.get_u64("repeats", 5));
  if (opt.link_repeats < 1) usage_fail("--repeats must be at least 1");
  if (auto s = args.get("in-call")) opt.in_call_elements = parse_size(*s, "--in-call");
  if (auto s = args.get("in-call-segment"))
    opt.in_call_segment = parse_size(*s, "--in-call-segment");
  opt.in_call_repeats = static_cast<int>(args.get_u64("in-call-repeats", 2));
  const std::uint64_t per_node = args.get_u64("ranks-per-node", 0);
  if (args.has("ranks-per-node") && per_node < 1) usage_fail("--ranks-per-node must be at least 1");

  int me = 0, ranks = 1;
  result<comm::cost_profile> profile = status{status_code::internal_error, "not run"};
#if GRADCODEC_TOOL_HAVE_MPI
  mpi_session session("calibrate");
  {
    std::unique_ptr<comm::mpi_communicator> mpi;
    if (auto st = comm::mpi_communicator::create(MPI_COMM_WORLD, mpi); !st.ok())
      fail(describe("calibrate", st));
    me = mpi->rank();
    ranks = mpi->size();
    if (per_node != 0 && static_cast<std::uint64_t>(mpi->size()) % per_node != 0)
      usage_fail("--ranks-per-node must divide the number of ranks");
    profile = measure(*mpi, opt, per_node);
  }
#else
  {
    auto single = comm::thread_communicator::create(1);
    profile = measure(*single[0], opt, per_node);
  }
#endif
  if (!profile.ok()) fail(describe("calibrate", profile.error()));
  if (me != 0) return 0;
  if (ranks == 1)
    std::cerr << "calibrate: one rank, so the link was not measured (the profile keeps the "
                 "defaults; run under mpirun, or pass --bandwidth to gradcodec plan)\n";
  const std::string json = comm::profile_to_json(profile.value());
  if (auto out = args.get("out")) {
    std::ofstream f(*out);
    f << json;
    f.flush();
    if (!f) fail("cannot write '" + *out + "'");
    std::cout << "wrote " << *out << " (" << profile.value().compute.codecs.size() << " codecs, "
              << ranks << " rank" << (ranks > 1 ? "s" : "") << ")\n";
  } else {
    std::cout << json;
  }
  return 0;
}

}  // namespace gradcodec::tool
