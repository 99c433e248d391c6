// SPDX-License-Identifier: Apache-2.0
// The allreduce strategies over NCCL with device buffers, one rank per GPU of this machine
// (up to 4; one GPU gives a 1-rank clique): every scenario of comm_test_util, on the
// CUDA codec backend and the device buffer services, ends with the outputs and saved
// state of the thread simulation on the reference backend, bit for bit. Skipped where no
// CUDA device is present (scripts/gpu-check runs it on a GPU machine).
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>
#include <nccl.h>

#include <algorithm>
#include <thread>
#include <vector>

#include "comm_test_util.hpp"
#include "gradcodec/comm/nccl.hpp"

namespace {

using namespace comm_test;
using gc::status;

int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) return 0;
  return n;
}

TEST(NcclAllreduce, EveryScenarioEqualsTheHostSimulationBitForBit) {
  const int ndev = std::min(device_count(), 4);
  if (ndev == 0)
    GTEST_SKIP() << "NCCL tests need a GPU: " << gc::backend_unavailable_reason(gc::backend::cuda);
  std::vector<scenario> scenarios;
  for (auto& sc : all_scenarios())
    if (sc.ranks_per_node == 0 || ndev >= 2) scenarios.push_back(sc);
  std::vector<ncclComm_t> comms(static_cast<std::size_t>(ndev));
  ASSERT_EQ(ncclCommInitAll(comms.data(), ndev, nullptr), ncclSuccess);
  // results[scenario][rank]; every rank runs the scenarios in the same order.
  std::vector<std::vector<rank_result>> results(
      scenarios.size(), std::vector<rank_result>(static_cast<std::size_t>(ndev)));
  std::vector<status> setup(static_cast<std::size_t>(ndev));
  std::vector<std::thread> threads;
  for (int d = 0; d < ndev; ++d) {
    threads.emplace_back([&, d] {
      cudaSetDevice(d);
      cudaStream_t stream = nullptr;
      cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
      std::unique_ptr<gcc::nccl_communicator> c;
      status st =
          gcc::nccl_communicator::create(comms[static_cast<std::size_t>(d)], stream, true, c);
      if (st.ok() && c->memory_services() == nullptr)
        st = {gc::status_code::backend_unavailable, "no device buffer services in this build"};
      setup[static_cast<std::size_t>(d)] = st;
      if (st.ok())
        for (std::size_t s = 0; s < scenarios.size(); ++s)
          results[s][static_cast<std::size_t>(d)] = run_scenario(*c, scenarios[s]);
      c.reset();
      cudaStreamDestroy(stream);
    });
  }
  for (auto& t : threads) t.join();
  for (int d = 0; d < ndev; ++d)
    ASSERT_TRUE(setup[static_cast<std::size_t>(d)].ok())
        << "device " << d << ": " << setup[static_cast<std::size_t>(d)].message();
  for (std::size_t s = 0; s < scenarios.size(); ++s) {
    const auto host = simulate(scenarios[s], ndev);
    for (int r = 0; r < ndev; ++r) {
      const auto& got = results[s][static_cast<std::size_t>(r)];
      EXPECT_TRUE(got.st.ok()) << scenarios[s].name << " rank " << r << ": " << got.st.message();
      if (!got.st.ok()) continue;
      EXPECT_EQ(digest(got, true), digest(host[static_cast<std::size_t>(r)], true))
          << scenarios[s].name << " W=" << ndev << " rank " << r << " (outputs and saved state)";
    }
  }
}

}  // namespace
