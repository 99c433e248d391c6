// SPDX-License-Identifier: Apache-2.0
// The collective adapters under mpirun (registered for N = 2, 3, 4): the MPI communicator
// itself, then every scenario of comm_test_util (every codec with every strategy it
// supports, over several steps with the state carried) compared bit for bit with the
// thread-communicator simulation of the same call, which every rank runs locally; all
// ranks must also agree with each other. Faults must give the same error everywhere.
//
// Every rank runs every test and reaches every collective even after a failed check
// (EXPECT, never ASSERT, around collectives), so a failure cannot turn into a hang.
#include <gtest/gtest.h>

#include <mpi.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <string>

#include "comm_test_util.hpp"
#include "gradcodec/comm/mpi.hpp"
#include "gradcodec/comm/outer.hpp"

namespace {

using namespace comm_test;
using gc::status;
using gc::status_code;

gcc::mpi_communicator* world = nullptr;

std::uint64_t hash_text(std::string_view s) {
  std::uint64_t h = 0xcbf29ce484222325ull;
  for (char c : s) {
    h ^= static_cast<unsigned char>(c);
    h *= 0x100000001b3ull;
  }
  return h;
}

//! Every rank's value of x, in rank order.
std::vector<std::uint64_t> gather(std::uint64_t x) {
  std::vector<std::uint64_t> all(static_cast<std::size_t>(world->size()));
  EXPECT_TRUE(world->allgather(&x, 8, all.data()).ok());
  return all;
}

//! True on every rank when it is true on every rank.
bool everywhere(bool ok) {
  std::uint64_t v = ok ? 1 : 0;
  EXPECT_TRUE(world->allreduce(&v, &v, 1, gcc::element_type::u64, gcc::reduce_op::min).ok());
  return v == 1;
}

TEST(MpiCommunicator, CollectivesMoveTheRightBytes) {
  const int w = world->size(), me = world->rank();
  std::vector<std::uint64_t> sizes(static_cast<std::size_t>(w));
  for (int r = 0; r < w; ++r)
    sizes[static_cast<std::size_t>(r)] = static_cast<std::uint64_t>(3 * r + 1);
  std::vector<std::uint8_t> mine(static_cast<std::size_t>(3 * me + 1),
                                 static_cast<std::uint8_t>(me + 1));
  std::vector<std::uint8_t> all(std::accumulate(sizes.begin(), sizes.end(), std::size_t{0}));
  EXPECT_TRUE(world->allgatherv(mine.data(), mine.size(), all.data(), sizes).ok());
  std::size_t at = 0;
  for (int r = 0; r < w; ++r)
    for (int j = 0; j < 3 * r + 1; ++j) EXPECT_EQ(all[at++], r + 1);
  // Non-blocking alltoallv with zero-byte blocks: s sends (s + d) % 3 bytes to d.
  std::vector<std::uint64_t> out_sizes(static_cast<std::size_t>(w)),
      in_sizes(static_cast<std::size_t>(w));
  std::vector<std::uint8_t> out, in;
  for (int d = 0; d < w; ++d) {
    out_sizes[static_cast<std::size_t>(d)] = static_cast<std::uint64_t>((me + d) % 3);
    in_sizes[static_cast<std::size_t>(d)] = static_cast<std::uint64_t>((d + me) % 3);
    out.insert(out.end(), static_cast<std::size_t>((me + d) % 3),
               static_cast<std::uint8_t>(10 * me + d));
  }
  in.resize(std::accumulate(in_sizes.begin(), in_sizes.end(), std::size_t{0}) + 1);
  gcc::request req, req2;
  EXPECT_TRUE(world->ialltoallv(out.data(), out_sizes, in.data(), in_sizes, req).ok());
  EXPECT_TRUE(req.active());
  std::uint64_t x = static_cast<std::uint64_t>(me) + 1, sum = 0;
  EXPECT_TRUE(
      world->iallreduce(&x, &sum, 1, gcc::element_type::u64, gcc::reduce_op::sum, req2).ok());
  EXPECT_TRUE(world->wait(req).ok());
  EXPECT_TRUE(world->wait(req2).ok());
  EXPECT_FALSE(req.active());
  EXPECT_EQ(sum, static_cast<std::uint64_t>(w) * (w + 1) / 2);
  at = 0;
  for (int s = 0; s < w; ++s)
    for (int j = 0; j < (s + me) % 3; ++j) EXPECT_EQ(in[at++], 10 * s + me);
  // In-place reductions: max and min of f32 and i32.
  float f[2] = {static_cast<float>(me), -static_cast<float>(me)};
  EXPECT_TRUE(world->allreduce(f, f, 2, gcc::element_type::f32, gcc::reduce_op::max).ok());
  EXPECT_EQ(f[0], static_cast<float>(w - 1));
  EXPECT_EQ(f[1], 0.0f);
  std::int32_t i = me - 5;
  EXPECT_TRUE(world->allreduce(&i, &i, 1, gcc::element_type::i32, gcc::reduce_op::min).ok());
  EXPECT_EQ(i, -5);
  std::uint64_t b = me == 1 ? 0xFEEDull : 0;
  EXPECT_TRUE(world->broadcast(&b, 8, 1).ok());
  EXPECT_EQ(b, 0xFEEDull);
  // A split into even and odd ranks.
  std::unique_ptr<gcc::communicator> sub;
  EXPECT_TRUE(world->split(me % 2, me, sub).ok());
  ASSERT_NE(sub, nullptr);
  EXPECT_EQ(sub->size(), (w - me % 2 + 1) / 2);
  EXPECT_EQ(sub->rank(), me / 2);
  EXPECT_TRUE(world->barrier().ok());
}

TEST(MpiCommunicator, MpiErrorsBecomeStatuses) {
  // A negative root is refused before MPI sees it; an invalid reduction op for the type
  // is caught by MPI itself under MPI_ERRORS_RETURN on every rank alike.
  std::uint64_t x = 0;
  auto st = world->broadcast(&x, 8, -1);
  EXPECT_EQ(st.code(), status_code::invalid_argument);
  EXPECT_TRUE(everywhere(true));
}

TEST(MpiAllreduce, EveryScenarioMatchesTheThreadSimulationBitForBit) {
  const int w = world->size(), me = world->rank();
  int checked = 0;
  for (const auto& sc : all_scenarios()) {
    const rank_result got = run_scenario(*world, sc);
    const auto sim = simulate(sc, w);
    const rank_result& want = sim[static_cast<std::size_t>(me)];
    EXPECT_TRUE(got.st.ok()) << sc.name << ": " << got.st.message();
    EXPECT_TRUE(want.st.ok()) << sc.name << " (simulation): " << want.st.message();
    EXPECT_EQ(got.outputs.size(), static_cast<std::size_t>(sc.steps)) << sc.name;
    const bool same = got.outputs == want.outputs && got.state == want.state;
    EXPECT_TRUE(same) << sc.name << ": rank " << me << " differs from the thread simulation";
    // Every rank ends with the same result bytes.
    const auto digests = gather(digest(got));
    for (int r = 0; r < w; ++r)
      EXPECT_EQ(digests[static_cast<std::size_t>(r)], digests[0])
          << sc.name << ": rank " << r << " vs rank 0";
    ++checked;
  }
  EXPECT_GT(checked, 40);
}

TEST(MpiAllreduce, SharedMemoryHierarchyMatchesTheSimulation) {
  // On one machine every rank shares one node: the leader runs the compressed stage alone.
  int color = -1;
  EXPECT_TRUE(world->node_color(color).ok());
  EXPECT_EQ(color, 0);
  gcc::hierarchy h;
  EXPECT_TRUE(gcc::make_hierarchy(*world, color, h).ok());
  EXPECT_EQ(h.leader(), world->rank() == 0);
  scenario sc;
  sc.spec = "qsgd:levels=7,bucket=64";
  sc.ranks_per_node = world->size();  // the same grouping, in the simulation
  const rank_result got = [&] {
    rank_result res;
    gcc::allreduce_config cfg;
    cfg.spec = gc::parse_spec(sc.spec).value();
    cfg.where = gc::backend::reference;
    gcc::allreduce_state state;
    gcc::workspace ws;
    for (int step = 0; step < sc.steps; ++step) {
      auto g = make_grad(sc.n, world->rank(), step, 1.0f);
      const gc::context ctx{1234, static_cast<std::uint64_t>(step), 7};
      res.st = gcc::allreduce(h, cfg, ctx, gc::view(std::as_const(g)), gc::view(g), state, ws);
      const auto* p = reinterpret_cast<const std::byte*>(g.data());
      res.outputs.emplace_back(p, p + 4 * g.size());
      if (!res.st.ok()) break;
    }
    res.state.resize(gcc::state_bytes(state));
    (void)gcc::save_state(state, res.state);
    return res;
  }();
  const auto sim = simulate(sc, world->size());
  EXPECT_TRUE(got.st.ok()) << got.st.message();
  EXPECT_EQ(got.outputs, sim[static_cast<std::size_t>(world->rank())].outputs);
  EXPECT_EQ(got.state, sim[static_cast<std::size_t>(world->rank())].state);
}

TEST(MpiFaults, MismatchedConfigGivesTheSameErrorOnEveryRank) {
  const int last = world->size() - 1;
  struct variant {
    const char* what;
    const char* needle;
  };
  for (const auto& v :
       {variant{"n", "the element count"}, variant{"spec", "the codec spec"},
        variant{"strategy", "the strategy"}, variant{"unsupported", "cannot run this call"},
        variant{"pipeline", "pipelining"}}) {
    gcc::allreduce_config cfg;
    cfg.spec = gc::parse_spec("topk:ratio=0.1").value();
    cfg.how = gcc::strategy::two_phase;
    cfg.where = gc::backend::reference;
    std::uint64_t n = 500;
    const bool odd = world->rank() == last;
    const std::string what = v.what;
    if (odd && what == "n") n = 499;
    if (odd && what == "spec") cfg.spec.ratio = 0.2;
    if (odd && what == "strategy") cfg.how = gcc::strategy::allgather;
    if (odd && what == "unsupported") cfg.how = gcc::strategy::dense;
    if (odd && what == "pipeline") cfg.pipeline = true;
    auto g = make_grad(n, world->rank(), 0, 1.0f);
    gcc::allreduce_state state;
    gcc::workspace ws;
    const status st =
        gcc::allreduce(*world, cfg, {1, 0, 0}, gc::view(std::as_const(g)), gc::view(g), state, ws);
    EXPECT_EQ(st.code(), status_code::comm_error) << v.what;
    EXPECT_NE(std::string(st.message()).find(v.needle), std::string::npos)
        << v.what << ": " << st.message();
    const auto hashes = gather(hash_text(st.message()));
    for (int r = 0; r < world->size(); ++r)
      EXPECT_EQ(hashes[static_cast<std::size_t>(r)], hashes[0])
          << v.what << ": rank " << r << " reports another error";
    // The communicator is still usable afterwards.
    EXPECT_TRUE(world->barrier().ok());
  }
}

TEST(MpiFaults, EncodeFailureOnOneRankFailsEveryRank) {
  for (auto how : {gcc::strategy::allgather, gcc::strategy::two_phase}) {
    gcc::allreduce_config cfg;
    cfg.spec = gc::parse_spec("qsgd:levels=7,bucket=64,nonfinite=error").value();
    cfg.how = how;
    cfg.where = gc::backend::reference;
    cfg.segment_elements = 128;
    cfg.pipeline = true;
    auto g = make_grad(600, world->rank(), 0, 1.0f);
    if (world->rank() == 0) g[300] = std::numeric_limits<float>::infinity();
    gcc::allreduce_state state;
    gcc::workspace ws;
    const status st =
        gcc::allreduce(*world, cfg, {1, 0, 0}, gc::view(std::as_const(g)), gc::view(g), state, ws);
    if (world->rank() == 0) {
      EXPECT_EQ(st.code(), status_code::nonfinite_input) << st.message();
    } else {
      EXPECT_EQ(st.code(), status_code::comm_error) << st.message();
      EXPECT_NE(std::string(st.message()).find("rank 0 failed (nonfinite_input)"),
                std::string::npos)
          << st.message();
    }
    EXPECT_TRUE(world->barrier().ok());
  }
}

TEST(MpiFaults, CorruptBytesFromOneRankFailEveryRankWithoutHanging) {
  // The last rank garbles its n-th send; every rank returns an error and the communicator
  // stays usable (a rank left inside a collective would hang the barrier below).
  const int bad_rank = world->size() - 1;
  for (auto how : {gcc::strategy::allgather, gcc::strategy::two_phase}) {
    for (const char* spec : {"topk:ratio=0.1", "qsgd:levels=7,bucket=64"}) {
      for (int nth : {1, 2, 3}) {
        comm_test::corrupting_communicator bad(*world, bad_rank, nth);
        gcc::allreduce_config cfg;
        cfg.spec = gc::parse_spec(spec).value();
        cfg.how = how;
        cfg.where = gc::backend::reference;
        cfg.segment_elements = 256;
        cfg.pipeline = true;
        auto g = make_grad(1000, world->rank(), 0, 1.0f);
        gcc::allreduce_state state;
        gcc::workspace ws;
        const status st =
            gcc::allreduce(bad, cfg, {1, 0, 0}, gc::view(std::as_const(g)), gc::view(g), state, ws);
        const auto garbled = gather(bad.corrupted() ? 1u : 0u);
        const auto codes = gather(static_cast<std::uint64_t>(st.code()));
        if (garbled[static_cast<std::size_t>(bad_rank)] != 0) {
          EXPECT_FALSE(st.ok()) << spec << " send " << nth << ": a result from garbage";
          for (int r = 0; r < world->size(); ++r)
            EXPECT_EQ(codes[static_cast<std::size_t>(r)], codes[0])
                << spec << " send " << nth << ": rank " << r << " reports another kind of error ("
                << st.message() << " here)";
        }
        EXPECT_TRUE(world->barrier().ok());
      }
    }
  }
}

//! Prints only failures (with the rank) on ranks other than 0.
class failure_printer : public testing::EmptyTestEventListener {
 public:
  explicit failure_printer(int rank) : rank_(rank) {}
  void OnTestPartResult(const testing::TestPartResult& r) override {
    if (r.failed())
      std::fprintf(stderr, "[rank %d] %s:%d: %s\n", rank_, r.file_name() ? r.file_name() : "?",
                   r.line_number(), r.summary());
  }

 private:
  int rank_;
};

// The outer synchronizer over MPI, its delayed syncs reduced on the engine's thread
// (MPI_THREAD_SERIALIZED), gives the bytes of the same run on the thread simulation.
TEST(MpiOuter, DelayedFragmentedSyncsEqualTheThreadSimulationWhetherWaitsSpinOrPoll) {
  const int w = world->size();
  const std::uint64_t n = 300;
  gcc::outer_config cfg;
  cfg.reduce = config("minmax:bits=4");
  cfg.sync_every = 6;
  cfg.fragments = 2;
  cfg.delay = 2;
  cfg.momentum = 0.5f;
  cfg.nesterov = true;
  auto train = [&](gcc::communicator& c, std::vector<std::byte>& saved) -> status {
    std::vector<float> theta(n);
    for (std::uint64_t j = 0; j < n; ++j) theta[j] = std::cos(static_cast<float>(j));
    gcc::outer_state state;
    gcc::outer_workspace ws;
    if (auto st = gcc::outer_init(c, cfg, gc::view(theta), state); !st.ok()) return st;
    for (int t = 0; t < 20; ++t) {
      for (std::uint64_t j = 0; j < n; ++j)
        theta[j] = std::fma(-0.1f, theta[j] - std::sin(0.37f * static_cast<float>(j) + c.rank()),
                            theta[j]);
      if (auto st = gcc::outer_step(c, cfg, gc::view(theta), state, ws); !st.ok()) return st;
    }
    if (auto st = gcc::outer_settle(state, ws); !st.ok()) return st;
    saved.resize(gcc::outer_state_bytes(state));
    auto r = gcc::save_outer_state(state, saved);
    return r ? status{} : r.error();
  };
  std::vector<std::vector<std::byte>> simulated(static_cast<std::size_t>(w));
  const auto sim = gcc::run_threads(w, [&](gcc::communicator& c) {
    return train(c, simulated[static_cast<std::size_t>(c.rank())]);
  });
  EXPECT_TRUE(sim[static_cast<std::size_t>(world->rank())].ok());
  for (const auto poll : {std::chrono::microseconds(0), std::chrono::microseconds(50)}) {
    world->set_wait_poll(poll);
    std::vector<std::byte> mine;
    const status st = train(*world, mine);
    EXPECT_TRUE(st.ok()) << st.message();
    EXPECT_EQ(mine, simulated[static_cast<std::size_t>(world->rank())])
        << "wait_poll " << poll.count() << " us";
  }
  world->set_wait_poll(std::chrono::microseconds(0));
}

}  // namespace

int main(int argc, char** argv) {
  // The outer synchronizer's delayed syncs call MPI from the engine's thread.
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED, &provided);
  if (provided < MPI_THREAD_SERIALIZED) {
    std::fprintf(stderr, "MPI gives thread level %d, below MPI_THREAD_SERIALIZED\n", provided);
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  testing::InitGoogleTest(&argc, argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (rank != 0) {
    auto& listeners = testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new failure_printer(rank));
  }
  std::unique_ptr<gcc::mpi_communicator> comm;
  if (auto st = gcc::mpi_communicator::create(MPI_COMM_WORLD, comm); !st.ok()) {
    std::fprintf(stderr, "mpi_communicator: %s\n", st.message());
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  world = comm.get();
  int failed = RUN_ALL_TESTS();
  // The job fails when any rank failed.
  int any = 0;
  MPI_Allreduce(&failed, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  comm.reset();
  MPI_Finalize();
  return any;
}
