// SPDX-License-Identifier: Apache-2.0
// The strategies' device paths, run on simulated device memory (simulated_device.hpp):
// every scenario gives the host path's bytes and state bit for bit, no buffer service or
// collective ever sees a pointer outside device memory, host buffers handed to a device
// communicator are refused on every rank, and a state moves between host and device
// memory without changing the results. The CUDA buffer services run the same programs on
// a GPU (test_comm_nccl, scripts/gpu-check).
#include <gtest/gtest.h>

#include <string>
#include <utility>

#include "comm_test_util.hpp"
#include "simulated_device.hpp"

namespace {

using namespace comm_test;
using gc::status;
using gc::status_code;

TEST(DevicePaths, EveryScenarioMatchesTheHostPathBitForBit) {
  const std::uint64_t before = simulated_device_memory::violations();
  for (const auto& sc : all_scenarios()) {
    for (int w : {1, 2, 3}) {
      if (sc.ranks_per_node > 0 && w < 2) continue;
      const auto host = simulate(sc, w);
      const auto dev = simulate_on_device(sc, w);
      for (int r = 0; r < w; ++r) {
        const auto& d = dev[static_cast<std::size_t>(r)];
        ASSERT_TRUE(d.st.ok()) << sc.name << " w=" << w << " rank " << r << ": " << d.st.message();
        ASSERT_TRUE(host[static_cast<std::size_t>(r)].st.ok()) << sc.name;
        EXPECT_EQ(digest(d, true), digest(host[static_cast<std::size_t>(r)], true))
            << sc.name << " w=" << w << " rank " << r << " (outputs and saved state)";
      }
    }
  }
  EXPECT_EQ(simulated_device_memory::violations(), before);
}

//! One allreduce step of `spec` over a simulated device communicator wrapping c, on this
//! rank's gradient of n elements: in device memory, or (on_host) left in host memory.
status one_device_step(gcc::communicator& c, const char* spec, std::uint64_t n, bool on_host) {
  device_like_communicator dev(c);
  const auto cfg = config(spec);
  gcc::allreduce_state state;
  gcc::workspace ws;
  auto g = make_grad(n, c.rank(), 0, 1.0f);
  if (on_host)
    return gcc::allreduce(dev, cfg, {1, 0, 0}, gc::view(std::as_const(g)), gc::view(g), state, ws);
  auto& mem = *dev.memory_services();
  auto b = mem.allocate(n * 4);
  if (auto s = mem.upload(b.get(), g.data(), n * 4); !s.ok()) return s;
  const gc::tensor_view io{b.get(), n, gc::dtype::f32, 0};
  return gcc::allreduce(dev, cfg, {1, 0, 0}, io, io, state, ws);
}

//! Every status is comm_error and names `needle`.
void expect_everywhere(const std::vector<status>& st, const char* needle) {
  for (const auto& s : st) {
    EXPECT_EQ(s.code(), status_code::comm_error) << s.message();
    EXPECT_NE(std::string(s.message()).find(needle), std::string::npos) << s.message();
  }
}

TEST(DevicePaths, HostBuffersOnADeviceCommunicatorAreRefusedOnEveryRank) {
  // Only rank 1 passes host memory: the others must hear of it, not hang.
  expect_everywhere(gcc::run_threads(3,
                                     [](gcc::communicator& c) {
                                       return one_device_step(c, "qsgd:levels=7,bucket=64", 300,
                                                              c.rank() == 1);
                                     }),
                    "rank 1 cannot run this call");
}

TEST(DevicePaths, NonfiniteErrorSpecsAreRefusedOnEveryRank) {
  expect_everywhere(gcc::run_threads(2,
                                     [](gcc::communicator& c) {
                                       return one_device_step(c, "qsgd:levels=7,nonfinite=error",
                                                              64, false);
                                     }),
                    "nonfinite=error");
}

TEST(DevicePaths, CorruptBytesFromOneRankFailEveryRankWithoutHanging) {
  // As comm.Faults.CorruptBytes*, with the headers read through device copies.
  const std::pair<const char*, gcc::strategy> cases[] = {
      {"topk:ratio=0.1", gcc::strategy::two_phase},
      {"topk:ratio=0.1", gcc::strategy::allgather},
      {"qsgd:levels=7,bucket=64", gcc::strategy::allgather},
      {"threshold:tau=0.5", gcc::strategy::two_phase},
      {"sign:bucket=64", gcc::strategy::majority_vote},
      {"randomk:ratio=0.1", gcc::strategy::dense},
      {"powersgd:rank=2", gcc::strategy::dense}};
  int exercised = 0;
  for (const auto& [spec, how] : cases) {
    for (int nth : {1, 2, 3}) {
      SCOPED_TRACE(std::string(spec) + " send " + std::to_string(nth));
      std::vector<int> garbled(3, 0);
      auto st = gcc::run_threads(3, [&](gcc::communicator& c) -> status {
        corrupting_communicator bad(c, 1, nth);
        device_like_communicator dev(bad);
        auto cfg = config(spec, how);
        cfg.segment_elements = 256;
        const std::uint64_t n = 1000;
        auto g = make_grad(n, c.rank(), 0, 1.0f);
        auto& mem = *dev.memory_services();
        auto b = mem.allocate(n * 4);
        if (auto s = mem.upload(b.get(), g.data(), n * 4); !s.ok()) return s;
        const gc::tensor_view io{
            b.get(), n, gc::dtype::f32,
            how == gcc::strategy::dense && cfg.spec.id == gc::codec_id::powersgd ? 20u : 0u};
        gcc::allreduce_state state;
        gcc::workspace ws;
        const status s = gcc::allreduce(dev, cfg, {1, 0, 0}, io, io, state, ws);
        garbled[static_cast<std::size_t>(c.rank())] = bad.corrupted() ? 1 : 0;
        return s;
      });
      if (garbled[1] == 0) continue;  // fewer than nth sends from rank 1
      ++exercised;
      for (int r = 0; r < 3; ++r) {
        const status& e = st[static_cast<std::size_t>(r)];
        EXPECT_TRUE(e.code() == status_code::corrupt_frame || e.code() == status_code::comm_error)
            << "rank " << r << ": " << e.message();
        EXPECT_EQ(e.code(), st[0].code()) << "rank " << r << ": " << e.message();
      }
    }
  }
  EXPECT_GE(exercised, 12) << "most cases make three sends from rank 1";
}

//! One step in `mem`'s memory: this rank's gradient of n elements is uploaded, reduced in
//! place by call(view), downloaded and appended to out.
template <class Call>
status step_in(gcc::memory_ops& mem, int rank, int step, std::uint64_t n, std::vector<float>& out,
               Call call) {
  auto g = make_grad(n, rank, step, 1.0f);
  auto b = mem.allocate(n * 4);
  if (auto s = mem.upload(b.get(), g.data(), n * 4); !s.ok()) return s;
  if (auto s = call(gc::tensor_view{b.get(), n, gc::dtype::f32, 0}); !s.ok()) return s;
  if (auto s = mem.download(g.data(), b.get(), n * 4); !s.ok()) return s;
  out.insert(out.end(), g.begin(), g.end());
  return {};
}

//! Three steps of a hierarchical two-phase QSGD allreduce on W = 4 ranks, nodes of two,
//! with the node level (intra), the leaders' level (inter), both or neither on simulated
//! device memory: the outputs of every rank, concatenated.
std::vector<float> run_hierarchy(bool intra_on_device, bool inter_on_device) {
  std::vector<std::vector<float>> outputs(4);
  auto st = gcc::run_threads(4, [&](gcc::communicator& c) -> status {
    gcc::hierarchy h;
    if (auto s = gcc::make_hierarchy(c, c.rank() / 2, h); !s.ok()) return s;
    if (intra_on_device) h.intra = std::make_unique<device_like_communicator>(std::move(h.intra));
    if (inter_on_device && h.inter)
      h.inter = std::make_unique<device_like_communicator>(std::move(h.inter));
    const auto cfg = config("qsgd:levels=3,bucket=32", gcc::strategy::two_phase);
    gcc::allreduce_state state;
    gcc::workspace ws;
    auto& mem = *h.intra->memory_services();  // in and out live in the node's memory
    auto& out = outputs[static_cast<std::size_t>(c.rank())];
    for (int step = 0; step < 3; ++step) {
      const gc::context ctx{5, static_cast<std::uint64_t>(step), 0};
      if (auto s = step_in(
              mem, c.rank(), step, 300, out,
              [&](gc::tensor_view io) { return gcc::allreduce(h, cfg, ctx, io, io, state, ws); });
          !s.ok())
        return s;
    }
    return {};
  });
  for (const auto& s : st) EXPECT_TRUE(s.ok()) << s.message();
  std::vector<float> all;
  for (const auto& o : outputs) all.insert(all.end(), o.begin(), o.end());
  return all;
}

// Damage inside rank 1's frames (behind the block header, which stays intact) reaches the
// device path's frame-header read and its verdicts: each rank fails with the status code
// the host path gives it for the same bytes (the rank that decoded the frame names the
// damage, the others the failing rank).
TEST(DevicePaths, DamagedFramesFailEveryRankWithTheHostPathsCode) {
  struct damage {
    const char* spec;
    gcc::strategy how;
    std::uint64_t from, to;  // bytes of rank 1's send buffer to garble
    const char* what;
  };
  // allgather sends [16-byte block header][frame]; topk:ratio=0.1 of 1000 f32 elements
  // carries 100 values (400 bytes) then 100 indices from payload byte 400.
  const damage cases[] = {
      {"qsgd:levels=7,bucket=64", gcc::strategy::allgather, 16 + 4, 16 + 5, "version"},
      {"qsgd:levels=7,bucket=64", gcc::strategy::allgather, 16 + 8, 16 + 9, "n (checksum)"},
      {"topk:ratio=0.1", gcc::strategy::allgather, 16 + 48 + 400, 16 + 48 + 800, "indices"},
      {"topk:ratio=0.1", gcc::strategy::two_phase, 16 + 4, 16 + 5, "first chunk's version"},
  };
  for (const auto& d : cases)
    for (int nth : {1, 2}) {
      SCOPED_TRACE(std::string(d.spec) + " " + d.what + " send " + std::to_string(nth));
      std::vector<status> seen[2];
      std::vector<int> garbled(3, 0);
      for (int on_device : {0, 1})
        seen[on_device] = gcc::run_threads(3, [&](gcc::communicator& c) -> status {
          corrupting_communicator bad(c, 1, nth, d.from, d.to);
          device_like_communicator dev(bad);
          gcc::communicator& use = on_device ? static_cast<gcc::communicator&>(dev) : bad;
          const auto cfg = config(d.spec, d.how);
          const std::uint64_t n = 1000;
          auto g = make_grad(n, c.rank(), 0, 1.0f);
          gcc::allreduce_state state;
          gcc::workspace ws;
          status s;
          if (on_device) {
            auto& mem = *dev.memory_services();
            auto b = mem.allocate(n * 4);
            if (auto up = mem.upload(b.get(), g.data(), n * 4); !up.ok()) return up;
            const gc::tensor_view io{b.get(), n, gc::dtype::f32, 0};
            s = gcc::allreduce(use, cfg, {1, 0, 0}, io, io, state, ws);
          } else {
            s = gcc::allreduce(use, cfg, {1, 0, 0}, gc::view(std::as_const(g)), gc::view(g), state,
                               ws);
          }
          garbled[static_cast<std::size_t>(c.rank())] = bad.corrupted() ? 1 : 0;
          return s;
        });
      if (garbled[1] == 0) continue;  // fewer than nth sends from rank 1
      for (int r = 0; r < 3; ++r) {
        const status& h = seen[0][static_cast<std::size_t>(r)];
        const status& v = seen[1][static_cast<std::size_t>(r)];
        if (h.ok()) continue;  // that send was not a frame (the bytes it hit were unused)
        EXPECT_EQ(v.code(), h.code())
            << "rank " << r << ": device '" << v.message() << "', host '" << h.message() << "'";
        EXPECT_FALSE(seen[1][0].ok());  // every rank hears of it (rank 0 too)
      }
    }
}

TEST(DevicePaths, AHierarchyMayMixDeviceAndHostLevels) {
  // NCCL inside each node with MPI between the leaders (or the reverse) gives the bits of
  // an all-host hierarchy: the node sum crosses to the leaders' memory and back.
  const auto host = run_hierarchy(false, false);
  ASSERT_EQ(host.size(), 4u * 3u * 300u);
  EXPECT_EQ(run_hierarchy(true, false), host) << "device node, host leaders";
  EXPECT_EQ(run_hierarchy(false, true), host) << "host node, device leaders";
  EXPECT_EQ(run_hierarchy(true, true), host) << "all device";
}

TEST(DevicePaths, ALeaderWithoutDeviceMemoryForItsStateFailsEveryRankByItsWorldRank) {
  // Host nodes, device leaders; world rank 2 (the second node's leader) cannot place its
  // state on its device: every rank fails, naming world rank 2, and none hangs.
  auto st = gcc::run_threads(4, [](gcc::communicator& c) -> status {
    gcc::hierarchy h;
    if (auto s = gcc::make_hierarchy(c, c.rank() / 2, h); !s.ok()) return s;
    if (h.inter) {
      auto dev = std::make_unique<device_like_communicator>(std::move(h.inter));
      if (c.rank() == 2)
        static_cast<simulated_device_memory*>(dev->memory_services())->fail_next_allocations(1);
      h.inter = std::move(dev);
    }
    const auto cfg = config("qsgd:levels=3,bucket=32", gcc::strategy::two_phase);
    gcc::allreduce_state state;
    gcc::workspace ws;
    auto g = make_grad(300, c.rank(), 0, 1.0f);
    return gcc::allreduce(h, cfg, {5, 0, 0}, gc::view(std::as_const(g)), gc::view(g), state, ws);
  });
  EXPECT_EQ(st[2].code(), status_code::device_error) << st[2].message();
  for (int r : {0, 1, 3}) {
    const status& s = st[static_cast<std::size_t>(r)];
    EXPECT_EQ(s.code(), status_code::comm_error) << "rank " << r << ": " << s.message();
    EXPECT_NE(std::string(s.message()).find("rank 2 failed"), std::string::npos)
        << "rank " << r << ": " << s.message();
  }
}

//! Runs `steps` steps of a two-phase QSGD allreduce (both residuals in the state) on two
//! ranks, switching to host or device memory at step `switch_at`, and returns each rank's
//! output bytes of every step.
std::vector<std::vector<float>> run_switching(int steps, int switch_at, bool start_on_device) {
  std::vector<std::vector<float>> outputs(2);
  auto st = gcc::run_threads(2, [&](gcc::communicator& c) -> status {
    device_like_communicator dev(c);
    const auto cfg = config("qsgd:levels=3,bucket=32", gcc::strategy::two_phase);
    gcc::allreduce_state state;
    gcc::workspace ws;
    auto& out = outputs[static_cast<std::size_t>(c.rank())];
    for (int step = 0; step < steps; ++step) {
      const bool on_device = (step < switch_at) == start_on_device;
      gcc::communicator& comm = on_device ? static_cast<gcc::communicator&>(dev) : c;
      const gc::context ctx{9, static_cast<std::uint64_t>(step), 0};
      if (auto s = step_in(*comm.memory_services(), c.rank(), step, 257, out,
                           [&](gc::tensor_view io) {
                             return gcc::allreduce(comm, cfg, ctx, io, io, state, ws);
                           });
          !s.ok())
        return s;
      if (on_device != (state.device != nullptr))
        return {status_code::internal_error, "the state is not where the last call ran"};
    }
    return {};
  });
  for (const auto& s : st) EXPECT_TRUE(s.ok()) << s.message();
  return outputs;
}

TEST(DevicePaths, TheStateMovesBetweenHostAndDeviceWithoutChangingResults) {
  const auto host_only = run_switching(4, 4, false);
  EXPECT_EQ(run_switching(4, 2, true), host_only) << "device, then host";
  EXPECT_EQ(run_switching(4, 2, false), host_only) << "host, then device";
  EXPECT_EQ(run_switching(4, 4, true), host_only) << "device only";
}

TEST(DevicePaths, ADeviceResidentStateSavesAndLoadsLikeAHostOne) {
  scenario sc;
  sc.name = "two_phase topk";
  sc.spec = "topk:ratio=0.1";
  sc.how = gcc::strategy::two_phase;
  sc.n = 513;
  const auto host = simulate(sc, 2);
  const auto dev = simulate_on_device(sc, 2);
  for (int r = 0; r < 2; ++r) {
    const auto& d = dev[static_cast<std::size_t>(r)];
    ASSERT_TRUE(d.st.ok()) << d.st.message();
    EXPECT_EQ(d.state, host[static_cast<std::size_t>(r)].state) << "rank " << r;
    gcc::allreduce_state loaded;
    ASSERT_TRUE(gcc::load_state(d.state, loaded).ok());
    EXPECT_EQ(loaded.device, nullptr);
    EXPECT_GT(loaded.worker_residual.size(), 0u);
    EXPECT_GT(loaded.server_residual.size(), 0u);
  }
}

}  // namespace
