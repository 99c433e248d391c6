// SPDX-License-Identifier: Apache-2.0
//! @file
//! `gradcodec bench --allreduce`: compressed allreduce (gradcodec::comm over MPI) against a
//! dense MPI_Allreduce in fp32 and bf16, run under mpirun. Its options join those of
//! `gradcodec bench`; it is built only when MPI is found (GRADCODEC_TOOL_HAVE_MPI), and
//! without MPI the flag is an error that says so.
#pragma once

#include "args.hpp"
#include "error.hpp"

namespace gradcodec::tool {

inline constexpr option_spec allreduce_flag{
    "allreduce", "",
    "time compressed allreduce over MPI instead (run under mpirun; see docs/tool.md)"};
inline constexpr option_spec allreduce_strategies_option{
    "strategies", "LIST",
    "--allreduce: allgather, two_phase, dense, majority_vote, auto separated by ',' (default: "
    "every strategy each codec supports)"};
inline constexpr option_spec allreduce_pipeline_option{
    "pipeline", "MODE", "--allreduce: off, on or both (default both)"};
inline constexpr option_spec allreduce_segment_option{
    "segment", "N", "--allreduce: segment elements, N or 2^K; 0 = one segment (default 2^20)"};
inline constexpr option_spec allreduce_warmup_option{
    "warmup", "N", "--allreduce: untimed calls before the timed ones (default 1)"};
inline constexpr option_spec allreduce_ranks_per_node_option{
    "ranks-per-node", "P",
    "--allreduce: hierarchical calls (allreduce(hierarchy, ...)) over nodes of P consecutive "
    "ranks, and the uncompressed mean through them (default: flat calls)"};

#if GRADCODEC_TOOL_HAVE_MPI
//! Runs the allreduce benchmark (every rank of the MPI job calls it); returns the exit code.
int run_bench_allreduce(const parsed_args& args);
#else
inline int run_bench_allreduce(const parsed_args&) {
  fail(
      "bench --allreduce: this gradcodec was built without MPI (configure with MPI installed, "
      "GRADCODEC_MPI=AUTO or ON, and run it under mpirun)");
}
#endif

}  // namespace gradcodec::tool
