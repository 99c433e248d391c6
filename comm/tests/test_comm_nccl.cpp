// SPDX-License-Identifier: Apache-2.0
// The NCCL communicator on the GPUs of one machine (one thread per device, a clique from
// ncclCommInitAll). Skipped where no CUDA device is present; on such machines it still
// proves that the adapter compiles and links against libnccl and the CUDA runtime.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>
#include <nccl.h>

#include <cstring>
#include <numeric>
#include <thread>
#include <vector>

#include "gradcodec/comm/allreduce.hpp"
#include "gradcodec/comm/nccl.hpp"

namespace {

namespace gc = gradcodec;
namespace gcc = gradcodec::comm;
using gc::status;
using gc::status_code;

int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) return 0;
  return n;
}

status check(bool ok, const char* what) {
  return ok ? status{} : status{status_code::internal_error, what};
}

//! Requests outstanding together, waited in reverse order; a request waited twice; zero
//! bytes everywhere.
status exercise_requests(gcc::nccl_communicator& c) {
  const int w = c.size();
  std::int64_t* d = nullptr;
  if (cudaMalloc(&d, 3 * sizeof(std::int64_t)) != cudaSuccess)
    return {status_code::device_error, "cudaMalloc"};
  const std::int64_t init[3] = {c.rank() + 1, 10, 100};
  cudaMemcpy(d, init, sizeof init, cudaMemcpyHostToDevice);
  gcc::request reqs[3];
  status st;
  for (int i = 0; i < 3 && st.ok(); ++i)
    st = c.iallreduce(d + i, d + i, 1, gcc::element_type::i64, gcc::reduce_op::sum, reqs[i]);
  const gcc::request again = reqs[0];
  for (int i = 2; i >= 0; --i) {
    const status wi = c.wait(reqs[i]);
    if (st.ok()) st = wi;
  }
  std::int64_t got[3] = {};
  cudaMemcpy(got, d, sizeof got, cudaMemcpyDeviceToHost);
  if (st.ok())
    st = check(got[0] == static_cast<std::int64_t>(w) * (w + 1) / 2 && got[1] == 10 * w &&
                   got[2] == 100 * w,
               "outstanding allreduces");
  if (st.ok()) {
    gcc::request copy = again;
    st = check(c.wait(copy).code() == status_code::invalid_argument, "request waited twice");
  }
  // Zero bytes: every call completes and moves nothing.
  const std::vector<std::uint64_t> zeros(static_cast<std::size_t>(w), 0);
  if (st.ok()) st = c.allgatherv(d, 0, d, zeros);
  if (st.ok()) st = c.alltoallv(d, zeros, d, zeros);
  if (st.ok()) st = c.allgather(d, 0, d);
  if (st.ok()) st = c.allreduce(d, d, 0, gcc::element_type::f32, gcc::reduce_op::sum);
  if (st.ok()) st = c.broadcast(d, 0, 0);
  if (st.ok()) {
    cudaMemcpy(got, d, sizeof got, cudaMemcpyDeviceToHost);
    st = check(got[0] == static_cast<std::int64_t>(w) * (w + 1) / 2, "zero-byte calls wrote");
  }
  cudaFree(d);
  return st;
}

//! The collectives on device buffers, from one rank.
status exercise(gcc::nccl_communicator& c) {
  const int w = c.size(), me = c.rank();
  std::vector<std::uint64_t> sizes(static_cast<std::size_t>(w));
  for (int r = 0; r < w; ++r)
    sizes[static_cast<std::size_t>(r)] = static_cast<std::uint64_t>(2 * r + 3);
  const std::size_t total = std::accumulate(sizes.begin(), sizes.end(), std::size_t{0});
  void *dsend = nullptr, *drecv = nullptr;
  if (cudaMalloc(&dsend, 4096) != cudaSuccess || cudaMalloc(&drecv, 4096) != cudaSuccess)
    return {status_code::device_error, "cudaMalloc"};
  std::vector<std::uint8_t> host(4096);
  std::vector<std::uint8_t> mine(static_cast<std::size_t>(2 * me + 3),
                                 static_cast<std::uint8_t>(me + 1));
  cudaMemcpy(dsend, mine.data(), mine.size(), cudaMemcpyHostToDevice);
  status st = c.allgatherv(dsend, mine.size(), drecv, sizes);
  if (st.ok()) {
    cudaMemcpy(host.data(), drecv, total, cudaMemcpyDeviceToHost);
    std::size_t at = 0;
    for (int r = 0; r < w && st.ok(); ++r)
      for (int j = 0; j < 2 * r + 3; ++j)
        if (host[at++] != r + 1) st = check(false, "allgatherv content");
  }
  // alltoallv: rank s sends s + d + 1 bytes of value 16*s + d to rank d.
  std::vector<std::uint64_t> out_sizes(static_cast<std::size_t>(w)),
      in_sizes(static_cast<std::size_t>(w));
  std::vector<std::uint8_t> out;
  for (int d = 0; d < w; ++d) {
    out_sizes[static_cast<std::size_t>(d)] = static_cast<std::uint64_t>(me + d + 1);
    in_sizes[static_cast<std::size_t>(d)] = static_cast<std::uint64_t>(d + me + 1);
    out.insert(out.end(), static_cast<std::size_t>(me + d + 1),
               static_cast<std::uint8_t>(16 * me + d));
  }
  if (st.ok()) {
    cudaMemcpy(dsend, out.data(), out.size(), cudaMemcpyHostToDevice);
    gcc::request req;
    st = c.ialltoallv(dsend, out_sizes, drecv, in_sizes, req);
    if (st.ok()) st = c.wait(req);
  }
  if (st.ok()) {
    cudaMemcpy(host.data(), drecv, 4096, cudaMemcpyDeviceToHost);
    std::size_t at = 0;
    for (int s = 0; s < w && st.ok(); ++s)
      for (int j = 0; j < s + me + 1; ++j)
        if (host[at++] != 16 * s + me) st = check(false, "alltoallv content");
  }
  if (st.ok()) {
    const std::int64_t v = me + 1;
    cudaMemcpy(dsend, &v, 8, cudaMemcpyHostToDevice);
    st = c.allreduce(dsend, dsend, 1, gcc::element_type::i64, gcc::reduce_op::sum);
    std::int64_t sum = 0;
    cudaMemcpy(&sum, dsend, 8, cudaMemcpyDeviceToHost);
    if (st.ok()) st = check(sum == static_cast<std::int64_t>(w) * (w + 1) / 2, "allreduce sum");
  }
  if (st.ok()) {
    const std::uint32_t b = me == 0 ? 0xABCDu : 0u;
    cudaMemcpy(dsend, &b, 4, cudaMemcpyHostToDevice);
    st = c.broadcast(dsend, 4, 0);
    std::uint32_t got = 0;
    cudaMemcpy(&got, dsend, 4, cudaMemcpyDeviceToHost);
    if (st.ok()) st = check(got == 0xABCDu, "broadcast");
  }
  if (st.ok()) st = c.barrier();
  if (st.ok()) st = exercise_requests(c);
  // The host-memory strategy layer refuses a device communicator, on every rank alike.
  if (st.ok()) {
    gcc::allreduce_config cfg;
    gcc::allreduce_state state;
    gcc::workspace ws;
    std::vector<float> g(64, 1.0f);
    const status refused =
        gcc::allreduce(c, cfg, {}, gc::view(std::as_const(g)), gc::view(g), state, ws);
    st = check(refused.code() == status_code::invalid_argument, "device communicator refused");
  }
  cudaFree(dsend);
  cudaFree(drecv);
  return st;
}

//! One thread per device d runs body(d, stream) with d current and a stream of its own;
//! every device's outcome must be ok.
template <class Body>
void on_every_device(int ndev, Body body) {
  std::vector<status> results(static_cast<std::size_t>(ndev));
  std::vector<std::thread> threads;
  for (int d = 0; d < ndev; ++d) {
    threads.emplace_back([&, d] {
      cudaSetDevice(d);
      cudaStream_t stream = nullptr;
      cudaStreamCreate(&stream);
      results[static_cast<std::size_t>(d)] = body(d, stream);
      cudaStreamDestroy(stream);
    });
  }
  for (auto& t : threads) t.join();
  for (int d = 0; d < ndev; ++d)
    EXPECT_TRUE(results[static_cast<std::size_t>(d)].ok())
        << "device " << d << ": " << results[static_cast<std::size_t>(d)].message();
}

TEST(NcclCommunicator, CollectivesOnEveryLocalDevice) {
  const int ndev = std::min(device_count(), 4);
  if (ndev == 0)
    GTEST_SKIP() << "NCCL tests need a GPU: " << gc::backend_unavailable_reason(gc::backend::cuda);
  std::vector<ncclComm_t> comms(static_cast<std::size_t>(ndev));
  ASSERT_EQ(ncclCommInitAll(comms.data(), ndev, nullptr), ncclSuccess);
  on_every_device(ndev, [&](int d, cudaStream_t stream) {
    std::unique_ptr<gcc::nccl_communicator> c;
    status st = gcc::nccl_communicator::create(comms[static_cast<std::size_t>(d)], stream, true, c);
    if (st.ok()) {
      EXPECT_EQ(c->memory(), gcc::memory_space::device);
      st = exercise(*c);
    }
    // split: one color gives a communicator of every rank that works on its own;
    // a negative color joins none.
    std::unique_ptr<gcc::communicator> child;
    if (st.ok()) st = c->split(0, -d, child);
    if (st.ok()) st = check(child != nullptr && child->size() == ndev, "split(0)");
    if (st.ok()) st = check(child->rank() == ndev - 1 - d, "split key orders the ranks");
    if (st.ok()) st = exercise(dynamic_cast<gcc::nccl_communicator&>(*child));
    child.reset();
    if (st.ok()) st = c->split(-1, 0, child);
    if (st.ok()) st = check(child == nullptr, "split(-1) joins none");
    return st;
  });
}

// A non-blocking communicator (config.blocking = 0, as PyTorch may hand one over): its
// enqueues, group ends and splits may return ncclInProgress, which the wrapper must wait out
// instead of reporting an error.
TEST(NcclCommunicator, NonBlockingCommunicatorWorks) {
  const int ndev = std::min(device_count(), 4);
  if (ndev == 0)
    GTEST_SKIP() << "NCCL tests need a GPU: " << gc::backend_unavailable_reason(gc::backend::cuda);
  ncclUniqueId id{};
  ASSERT_EQ(ncclGetUniqueId(&id), ncclSuccess);
  on_every_device(ndev, [&](int d, cudaStream_t stream) {
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    ncclComm_t comm = nullptr;
    const ncclResult_t r = ncclCommInitRankConfig(&comm, ndev, id, d, &config);
    ncclResult_t state = r;
    while (r == ncclInProgress && state == ncclInProgress) {
      if (ncclCommGetAsyncError(comm, &state) != ncclSuccess) state = ncclSystemError;
      std::this_thread::yield();
    }
    status st = check(state == ncclSuccess, "ncclCommInitRankConfig (non-blocking)");
    std::unique_ptr<gcc::nccl_communicator> c;
    if (st.ok()) st = gcc::nccl_communicator::create(comm, stream, true, c);
    if (st.ok()) st = exercise(*c);
    std::unique_ptr<gcc::communicator> child;
    if (st.ok()) st = c->split(0, d, child);
    if (st.ok()) st = check(child != nullptr && child->size() == ndev, "non-blocking split");
    if (st.ok()) st = exercise(dynamic_cast<gcc::nccl_communicator&>(*child));
    if (!c && comm != nullptr) (void)ncclCommAbort(comm);  // not handed over
    return st;
  });
}

TEST(NcclCommunicator, NullCommunicatorIsRefused) {
  std::unique_ptr<gcc::nccl_communicator> c;
  EXPECT_EQ(gcc::nccl_communicator::create(nullptr, nullptr, false, c).code(),
            status_code::invalid_argument);
  EXPECT_EQ(c, nullptr);
}

}  // namespace
