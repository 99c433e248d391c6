// SPDX-License-Identifier: Apache-2.0
//! @file
//! gradcodec bench --backend cuda (bench_cuda.cpp, built when the CUDA backend is).
#pragma once

#include <cstdint>
#include <vector>

#include "bench_report.hpp"
#include "gradcodec/spec.hpp"

namespace gradcodec::tool {

struct cuda_bench_request {
  std::vector<std::uint64_t> sizes;
  std::vector<codec_spec> specs;
  std::vector<int> gpus;  //!< empty: every visible GPU
};

//! Adds the rows of every GPU, size and codec to `st` (st.min_runs timed calls each).
void run_bench_cuda(const cuda_bench_request& req, run_state& st);

}  // namespace gradcodec::tool
