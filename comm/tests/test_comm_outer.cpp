// SPDX-License-Identifier: Apache-2.0
// The outer synchronizer (comm/outer.hpp) on thread communicators: the equivalence with
// synchronous SGD, bit-identical θ_global for every variant and codec, checkpoint and
// resume, disagreement and non-finite decisions, participation, the schedule.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "comm_test_util.hpp"
#include "gradcodec/comm/outer.hpp"
#include "gradcodec/comm/thread_communicator.hpp"

namespace {

using namespace comm_test;
using gc::status;
using gc::status_code;

constexpr float inner_lr = 0.1f;

// Rank r's inner loss is ½‖θ − c_r‖² with targets that differ by rank: the inner
// gradient is θ − c_r, and the model the ranks agree on tends to the mean of the c_r.
float target(int rank, std::uint64_t j) {
  return std::sin(0.37f * static_cast<float>(j) + static_cast<float>(rank));
}

void inner_step(std::vector<float>& theta, int rank, std::uint64_t step) {
  for (std::uint64_t j = 0; j < theta.size(); ++j) {
    const float noise = 0.05f * std::cos(0.11f * static_cast<float>(j * (step + 3)));
    theta[j] = std::fma(-inner_lr, theta[j] - target(rank, j) + noise, theta[j]);
  }
}

std::vector<float> initial(std::uint64_t n, int rank) {
  std::vector<float> v(n);
  for (std::uint64_t j = 0; j < n; ++j) v[j] = 0.5f * std::cos(static_cast<float>(j) + 7.0f * rank);
  return v;
}

struct rank_run {
  status st;
  std::vector<float> global, local;
  std::vector<std::byte> saved;
  gcc::phase_times times;
  std::uint64_t last_sync_bytes = 0;
  double sync_s = 0, exposed_s = 0;
};

// `steps` inner steps of the toy model on w threads, each followed by outer_step.
std::vector<rank_run> train(int w, const gcc::outer_config& cfg, std::uint64_t n, int steps) {
  std::vector<rank_run> out(static_cast<std::size_t>(w));
  auto st = gcc::run_threads(w, [&](gcc::communicator& c) -> status {
    auto& me = out[static_cast<std::size_t>(c.rank())];
    auto theta = initial(n, c.rank());
    gcc::outer_state state;
    gcc::outer_workspace ws;
    if (auto s = gcc::outer_init(c, cfg, gc::view(theta), state); !s.ok()) return s;
    for (int t = 0; t < steps; ++t) {
      inner_step(theta, c.rank(), state.step);
      if (auto s = gcc::outer_step(c, cfg, gc::view(theta), state, ws); !s.ok()) return s;
    }
    if (auto s = gcc::outer_settle(state, ws); !s.ok()) return s;
    me.saved.resize(gcc::outer_state_bytes(state));
    if (auto r = gcc::save_outer_state(state, me.saved); !r) return r.error();
    me.global = state.global;
    me.local = theta;
    me.times = ws.times();
    me.last_sync_bytes = ws.last_sync_bytes();
    me.sync_s = ws.sync_seconds();
    me.exposed_s = ws.exposed_seconds();
    return {};
  });
  for (int r = 0; r < w; ++r) out[static_cast<std::size_t>(r)].st = st[static_cast<std::size_t>(r)];
  return out;
}

gcc::outer_config outer(const char* spec, std::uint32_t h) {
  gcc::outer_config cfg;
  if (spec == nullptr)
    cfg.reduce.uncompressed = true;
  else
    cfg.reduce = config(spec);
  cfg.sync_every = h;
  return cfg;
}

void expect_identical_globals(const std::vector<rank_run>& runs, const std::string& what) {
  for (const auto& r : runs) ASSERT_TRUE(r.st.ok()) << what << ": " << r.st.message();
  for (const auto& r : runs) {
    ASSERT_EQ(r.global.size(), runs[0].global.size()) << what;
    EXPECT_EQ(std::memcmp(r.global.data(), runs[0].global.data(), r.global.size() * 4), 0)
        << what << ": θ_global differs between ranks";
  }
}

// H = 1, uncompressed Δ, outer SGD with lr 1 and no momentum is synchronous data-parallel
// SGD: θ' = θ − mean_r(θ − (θ − η g_r)). Against θ − η·mean_r(g_r) the only difference
// is the rounding of θ − η g_r (|error| ≤ ulp(θ)/2 per rank, the subtraction back from θ
// is exact), so each step agrees within 2 ulps of the largest θ_local, not bit for bit.
TEST(Outer, OneInnerStepDenseLocalSgdIsSynchronousSgd) {
  const int w = 4;
  const std::uint64_t n = 257;
  auto cfg = outer(nullptr, 1);
  std::vector<std::vector<float>> before(w), after(w);
  std::vector<std::vector<float>> grads(w);
  auto st = gcc::run_threads(w, [&](gcc::communicator& c) -> status {
    const auto r = static_cast<std::size_t>(c.rank());
    auto theta = initial(n, 0);
    gcc::outer_state state;
    gcc::outer_workspace ws;
    if (auto s = gcc::outer_init(c, cfg, gc::view(theta), state); !s.ok()) return s;
    for (int t = 0; t < 12; ++t) {
      if (t == 11) before[r] = state.global;
      std::vector<float> g(n);
      for (std::uint64_t j = 0; j < n; ++j) g[j] = theta[j] - target(c.rank(), j);
      if (t == 11) grads[r] = g;
      for (std::uint64_t j = 0; j < n; ++j) theta[j] = std::fma(-inner_lr, g[j], theta[j]);
      if (auto s = gcc::outer_step(c, cfg, gc::view(theta), state, ws); !s.ok()) return s;
      if (theta != state.global) return {status_code::internal_error, "θ_local != θ_global"};
    }
    after[r] = state.global;
    return {};
  });
  ASSERT_TRUE(all_ok(st)) << messages(st);
  for (std::uint64_t j = 0; j < n; ++j) {
    float mean = 0.0f;
    for (int r = 0; r < w; ++r) mean = std::fma(0.25f, grads[r][j], mean);
    const float sync = std::fma(-inner_lr, mean, before[0][j]);
    float m = std::fabs(before[0][j]);
    for (int r = 0; r < w; ++r) m = std::max(m, std::fabs(before[0][j] - inner_lr * grads[r][j]));
    const float ulp = std::nextafter(m, INFINITY) - m;
    EXPECT_LE(std::fabs(after[0][j] - sync), 2 * ulp) << "j=" << j;
    for (int r = 1; r < w; ++r) EXPECT_EQ(after[r][j], after[0][j]);
  }
}

TEST(Outer, EveryVariantAndCodecGivesTheSameGlobalOnEveryRank) {
  const std::uint64_t n = 600;
  struct variant {
    const char* name;
    gcc::outer_config cfg;
  };
  std::vector<variant> variants;
  auto add = [&](const char* name, gcc::outer_config c) { variants.push_back({name, c}); };
  add("local SGD, dense", outer(nullptr, 5));
  {
    auto c = outer(nullptr, 10);
    c.lr = 0.7f, c.momentum = 0.9f, c.nesterov = true;
    add("DiLoCo, dense, Nesterov", c);
  }
  for (const char* spec :
       {"minmax:bits=4", "minmax:bits=8", "topk:ratio=0.02", "dgc:ratio=0.05", "randomk:ratio=0.1",
        "threshold:tau=0.05", "qsgd", "terngrad", "onebit", "sign", "bf16", "fp16"}) {
    auto c = outer(spec, 4);
    c.momentum = 0.5f;
    add(spec, c);
  }
  const std::vector<gcc::tensor_slot> tensors = {
      {0, 100, 10}, {100, 200, 20}, {300, 50, 0}, {350, 250, 25}};
  {
    auto c = outer("powersgd:rank=2", 4);
    c.reduce.tensors = tensors;
    add("powersgd per tensor", c);
  }
  {
    auto c = outer("topk:ratio=0.05", 8);
    c.reduce.tensors = tensors;
    c.fragments = 4;
    add("streaming P=4, blocking", c);
    c.delay = 2;
    add("streaming P=4, τ=2", c);
  }
  {
    auto c = outer("minmax:bits=4", 6);
    c.fragments = 3;
    c.delay = 2;
    c.mix = 0.25f;
    add("streaming P=3 ranges, τ=2", c);
  }
  {
    auto c = outer("topk:ratio=0.05", 3);
    c.participants = 2;
    c.seed = 11;
    add("participation 2 of 4", c);
  }
  for (const auto& v : variants) {
    const auto runs = train(4, v.cfg, n, 25);
    expect_identical_globals(runs, v.name);
    // The ranks trained toward different targets: a sync must have moved θ_global.
    const auto init = initial(n, 0);
    EXPECT_NE(runs[0].global, init) << v.name;
    EXPECT_GT(runs[0].times.bytes_sent, 0u) << v.name;
    // Blocking syncs are exposed whole, by construction (no timing is asserted).
    for (const auto& r : runs) {
      EXPECT_GT(r.sync_s, 0.0) << v.name;
      if (v.cfg.delay == 0) {
        EXPECT_EQ(r.exposed_s, r.sync_s) << v.name;
      }
    }
  }
}

// Streaming: P fragments of about n/P elements, so every sync moves about 1/P of the
// bytes of a whole-model sync.
TEST(Outer, FragmentsCutTheBytesOfEachSync) {
  // Each sync also moves a constant part (its agreement, frame and block headers): at
  // 2^16 elements that keeps the ratio a little under 4.
  const std::uint64_t n = 1 << 16;
  auto whole = outer("minmax:bits=8", 8);
  auto streamed = whole;
  streamed.fragments = 4;
  const auto a = train(4, whole, n, 16);     // 2 syncs of the whole model
  const auto b = train(4, streamed, n, 16);  // 8 syncs of a quarter each
  ASSERT_TRUE(a[0].st.ok() && b[0].st.ok()) << a[0].st.message() << b[0].st.message();
  const double per_sync_whole = static_cast<double>(a[0].times.bytes_sent) / 2;
  const double per_sync_part = static_cast<double>(b[0].times.bytes_sent) / 8;
  EXPECT_GT(per_sync_whole / per_sync_part, 3.9);
  EXPECT_LE(per_sync_whole / per_sync_part, 4.0);
  // The workspace's count of one sync says the same.
  EXPECT_EQ(static_cast<double>(a[0].last_sync_bytes), per_sync_whole);
  EXPECT_GT(static_cast<double>(a[0].last_sync_bytes) / static_cast<double>(b[0].last_sync_bytes),
            3.9);
  // One agreement per sync: a sync makes the collectives of one allreduce of its Δ, whose
  // own agreement carries the sync's checks: 4 words more (their digest, the failure and
  // the non-finite words).
  std::vector<gcc::phase_times> call(4);
  auto st = gcc::run_threads(4, [&](gcc::communicator& c) -> status {
    std::vector<float> d = initial(n, c.rank());
    gcc::allreduce_state state;
    gcc::workspace ws;
    return gcc::allreduce(c, whole.reduce, {whole.seed, 0, 0}, gc::view(std::as_const(d)),
                          gc::view(d), state, ws, &call[static_cast<std::size_t>(c.rank())]);
  });
  ASSERT_TRUE(all_ok(st)) << messages(st);
  EXPECT_EQ(a[0].times.collectives, 2 * call[0].collectives);
  EXPECT_EQ(a[0].last_sync_bytes, call[0].bytes_sent + 4 * 8);
}

TEST(Outer, TheScheduleStaggersFragmentsAndStridesTensors) {
  gcc::outer_config c;
  c.sync_every = 8;
  c.fragments = 4;
  std::vector<std::int64_t> due;
  for (std::uint64_t t = 0; t <= 16; ++t)
    due.push_back(gcc::outer_fragment_due(c.sync_every, c.fragments, t));
  const std::vector<std::int64_t> expect = {-1, -1, 0,  -1, 1,  -1, 2,  -1, 3,
                                            -1, 0,  -1, 1,  -1, 2,  -1, 3};
  EXPECT_EQ(due, expect);
  // Equal tensors: i mod P, strided over the layers.
  std::vector<gcc::tensor_slot> t(12);
  for (std::uint64_t i = 0; i < 12; ++i) t[i] = {i * 3, 3, 0};
  c.reduce.tensors = t;
  const auto f1 = gcc::outer_fragment(c, 36, 1);
  ASSERT_EQ(f1.size(), 3u);
  EXPECT_EQ(f1[0].offset, 3u);
  EXPECT_EQ(f1[1].offset, 15u);
  EXPECT_EQ(f1[2].offset, 27u);
  // A large tensor after small ones: taken first, so the fragments are 30 and 30 (in index
  // order 10, 10 and 10 would spread first and the 30 land on one of them: 20 and 40). A
  // fragment's slots stay in index order.
  c.fragments = 2;
  const std::vector<gcc::tensor_slot> late = {{0, 10, 0}, {10, 10, 0}, {20, 10, 0}, {30, 30, 0}};
  c.reduce.tensors = late;
  const auto g0 = gcc::outer_fragment(c, 60, 0), g1 = gcc::outer_fragment(c, 60, 1);
  ASSERT_EQ(g0.size(), 1u);
  EXPECT_EQ(g0[0].offset, 30u);
  ASSERT_EQ(g1.size(), 3u);
  EXPECT_EQ(g1[0].offset, 0u);
  EXPECT_EQ(g1[1].offset, 10u);
  EXPECT_EQ(g1[2].offset, 20u);
  // A tensor larger than its fragment's room below the share (50) is split at a row: an
  // 8 x 10 matrix gives 5 rows to fragment 0, its other 3 rows to fragment 1.
  const std::vector<gcc::tensor_slot> big = {{0, 80, 8}, {80, 20, 0}};
  c.reduce.tensors = big;
  const auto h0 = gcc::outer_fragment(c, 100, 0), h1 = gcc::outer_fragment(c, 100, 1);
  ASSERT_EQ(h0.size(), 1u);
  EXPECT_TRUE(h0[0].offset == 0 && h0[0].n == 50 && h0[0].rows == 5);
  ASSERT_EQ(h1.size(), 2u);
  EXPECT_TRUE(h1[0].offset == 50 && h1[0].n == 30 && h1[0].rows == 3);
  EXPECT_TRUE(h1[1].offset == 80 && h1[1].n == 20 && h1[1].rows == 0);
}

// For any tensors the fragments cover every element once, in whole rows, in offset order,
// and none holds a row or more above the share ceil(total / P): the peak sync is the
// mean one.
TEST(Outer, FragmentsPartitionTheTensorsWithinARowOfTheShare) {
  std::uint64_t rng = 12345;
  auto next = [&rng](std::uint64_t m) {
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return (rng >> 33) % m;
  };
  for (int trial = 0; trial < 300; ++trial) {
    gcc::outer_config c;
    c.fragments = 1 + static_cast<std::uint32_t>(next(6));
    c.sync_every = 8;
    std::vector<gcc::tensor_slot> t;
    std::uint64_t at = 0, widest = 1;
    const std::uint64_t count = c.fragments + next(20);
    for (std::uint64_t i = 0; i < count; ++i) {
      const std::uint64_t rows = next(3) == 0 ? 0 : 1 + next(40);
      const std::uint64_t row = 1 + next(rows == 0 ? 1 : 64);
      const std::uint64_t n = rows == 0 ? 1 + next(3000) : rows * row;
      t.push_back({at, n, rows});
      at += n;
      widest = std::max(widest, rows == 0 ? 1 : row);
    }
    c.reduce.tensors = t;
    const std::uint64_t share = (at + c.fragments - 1) / c.fragments;
    std::vector<int> covered(at, 0);
    for (std::uint32_t p = 0; p < c.fragments; ++p) {
      std::uint64_t held = 0, last = 0;
      for (const auto& slot : gcc::outer_fragment(c, at, p)) {
        ASSERT_GE(slot.offset, last) << trial;
        last = slot.offset + slot.n;
        held += slot.n;
        for (std::uint64_t j = slot.offset; j < slot.offset + slot.n; ++j) ++covered[j];
        const auto whole = std::find_if(t.begin(), t.end(), [&](const gcc::tensor_slot& x) {
          return x.offset <= slot.offset && slot.offset + slot.n <= x.offset + x.n;
        });
        ASSERT_NE(whole, t.end()) << trial << ": a piece crosses tensors";
        if (whole->rows != 0) {
          const std::uint64_t row = whole->n / whole->rows;
          EXPECT_EQ((slot.offset - whole->offset) % row, 0u) << trial;
          EXPECT_EQ(slot.n, slot.rows * row) << trial;
        } else {
          EXPECT_EQ(slot.rows, 0u) << trial;
        }
      }
      EXPECT_LT(held, share + widest) << trial << " fragment " << p;
    }
    EXPECT_TRUE(std::all_of(covered.begin(), covered.end(), [](int k) { return k == 1; })) << trial;
  }
}

// A checkpoint taken with a sync in flight (settled, saved, loaded into a new state and
// workspace) continues to the same bytes as the run that never stopped.
TEST(Outer, ResumingFromACheckpointGivesTheSameBytes) {
  const std::uint64_t n = 500;
  auto cfg = outer("topk:ratio=0.05", 6);
  cfg.fragments = 2;
  cfg.delay = 2;
  cfg.momentum = 0.9f;
  cfg.nesterov = true;
  const auto whole = train(4, cfg, n, 30);
  ASSERT_TRUE(whole[0].st.ok()) << whole[0].st.message();
  std::vector<rank_run> resumed(4);
  auto st = gcc::run_threads(4, [&](gcc::communicator& c) -> status {
    auto theta = initial(n, c.rank());
    std::vector<std::byte> ckpt;
    std::vector<float> theta_ckpt;
    {
      gcc::outer_state state;
      gcc::outer_workspace ws;
      if (auto s = gcc::outer_init(c, cfg, gc::view(theta), state); !s.ok()) return s;
      for (int t = 0; t < 13; ++t) {  // sync sent after step 12, applied after 14
        inner_step(theta, c.rank(), state.step);
        if (auto s = gcc::outer_step(c, cfg, gc::view(theta), state, ws); !s.ok()) return s;
      }
      if (state.pending_fragment < 0) return {status_code::internal_error, "nothing in flight"};
      if (auto s = gcc::outer_settle(state, ws); !s.ok()) return s;
      ckpt.resize(gcc::outer_state_bytes(state));
      if (auto r = gcc::save_outer_state(state, ckpt); !r) return r.error();
      theta_ckpt = theta;
    }
    gcc::outer_state state;
    gcc::outer_workspace ws;
    if (auto s = gcc::load_outer_state(ckpt, state); !s.ok()) return s;
    theta = theta_ckpt;
    for (int t = 13; t < 30; ++t) {
      inner_step(theta, c.rank(), state.step);
      if (auto s = gcc::outer_step(c, cfg, gc::view(theta), state, ws); !s.ok()) return s;
    }
    if (auto s = gcc::outer_settle(state, ws); !s.ok()) return s;
    auto& me = resumed[static_cast<std::size_t>(c.rank())];
    me.saved.resize(gcc::outer_state_bytes(state));
    if (auto r = gcc::save_outer_state(state, me.saved); !r) return r.error();
    me.local = theta;
    return {};
  });
  ASSERT_TRUE(all_ok(st)) << messages(st);
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(resumed[r].saved, whole[r].saved) << "rank " << r;
    EXPECT_EQ(resumed[r].local, whole[r].local) << "rank " << r;
  }
}

TEST(Outer, StateFormRejectsCorruptionAndInFlightSaves) {
  auto cfg = outer("qsgd", 4);
  cfg.delay = 1;
  const auto runs = train(2, cfg, 100, 9);
  ASSERT_TRUE(runs[0].st.ok()) << runs[0].st.message();
  gcc::outer_state back;
  ASSERT_TRUE(gcc::load_outer_state(runs[0].saved, back).ok());
  auto bytes = runs[0].saved;
  bytes[70] ^= std::byte{1};
  EXPECT_EQ(gcc::load_outer_state(bytes, back).code(), status_code::corrupt_frame);
  bytes = runs[0].saved;
  bytes.pop_back();
  EXPECT_EQ(gcc::load_outer_state(bytes, back).code(), status_code::corrupt_frame);
  gcc::outer_state flying;
  flying.fingerprint = 1;
  flying.pending_fragment = 0;
  std::vector<std::byte> out(gcc::outer_state_bytes(flying));
  EXPECT_EQ(gcc::save_outer_state(flying, out).error().code(), status_code::invalid_argument);
}

std::vector<status> run_with(int w, const std::function<gcc::outer_config(int)>& cfg_of, int steps,
                             int nan_rank = -1, int nan_step = -1,
                             std::vector<std::vector<float>>* globals = nullptr) {
  return gcc::run_threads(w, [&](gcc::communicator& c) -> status {
    auto theta = initial(64, c.rank());
    gcc::outer_state state;
    gcc::outer_workspace ws;
    if (auto s = gcc::outer_init(c, cfg_of(0), gc::view(theta), state); !s.ok()) return s;
    for (int t = 0; t < steps; ++t) {
      inner_step(theta, c.rank(), state.step);
      if (c.rank() == nan_rank && t == nan_step) theta[5] = NAN;
      const auto before = state.global;
      const auto rounds = state.rounds;
      auto s = gcc::outer_step(c, cfg_of(c.rank()), gc::view(theta), state, ws);
      if (globals != nullptr && !s.ok()) {
        static std::mutex m;
        std::lock_guard lock(m);
        // The failed sync changed nothing the ranks share.
        if (state.global != before || state.rounds != rounds)
          return {status_code::internal_error, "a failed sync changed the state"};
        globals->push_back(state.global);
      }
      if (!s.ok()) return s;
    }
    return {};
  });
}

TEST(Outer, ARankWithAnotherConfigurationFailsEveryRankAlike) {
  // At init: every rank gets the same error naming the field.
  auto at_init = gcc::run_threads(4, [](gcc::communicator& c) -> status {
    auto cfg = outer("minmax:bits=4", 4);
    if (c.rank() == 2) cfg.sync_every = 5;
    auto theta = initial(64, c.rank());
    gcc::outer_state state;
    return gcc::outer_init(c, cfg, gc::view(theta), state);
  });
  for (const auto& s : at_init) {
    EXPECT_EQ(s.code(), status_code::comm_error);
    EXPECT_EQ(std::string(s.message()), at_init[0].message());
  }
  EXPECT_NE(std::string(at_init[0].message()).find("sync_every"), std::string::npos)
      << at_init[0].message();
  // Later: rank 1 changes its momentum; the next sync fails on every rank alike.
  auto later = run_with(
      4,
      [](int r) {
        auto c = outer("minmax:bits=4", 4);
        if (r == 1) c.momentum = 0.5f;
        return c;
      },
      8);
  for (const auto& s : later) {
    EXPECT_EQ(s.code(), status_code::comm_error) << s.message();
    EXPECT_EQ(std::string(s.message()), later[0].message());
  }
  EXPECT_NE(std::string(later[0].message()).find("momentum"), std::string::npos)
      << later[0].message();
  // A rank whose own checks fail at a sync (its parameters have another size) still takes
  // part in the sync's agreement, and every rank names it.
  auto own = gcc::run_threads(4, [](gcc::communicator& c) -> status {
    const auto cfg = outer("minmax:bits=4", 4);
    auto theta = initial(64, c.rank());
    gcc::outer_state state;
    gcc::outer_workspace ws;
    if (auto s = gcc::outer_init(c, cfg, gc::view(theta), state); !s.ok()) return s;
    for (int t = 0; t < 4; ++t) {
      inner_step(theta, c.rank(), state.step);
      gc::tensor_view v = gc::view(theta);
      if (c.rank() == 3 && t == 3) v.n -= 1;
      if (auto s = gcc::outer_step(c, cfg, v, state, ws); !s.ok()) return s;
    }
    return {};
  });
  for (const auto& s : own) {
    EXPECT_EQ(s.code(), status_code::comm_error) << s.message();
    EXPECT_EQ(std::string(s.message()), own[0].message());
  }
  EXPECT_NE(std::string(own[0].message()).find("rank 3 cannot run this sync"), std::string::npos)
      << own[0].message();
}

// Every rule of the configuration has a message of its own that fits a status whole, the
// same on every rank (outer_init checks the configuration before anything else).
TEST(Outer, AnInvalidConfigurationNamesTheRuleItBreaks) {
  struct broken {
    std::function<void(gcc::outer_config&)> edit;
    const char* rule;
  };
  static const gcc::tensor_slot one_tensor[] = {{0, 64, 0}};
  static const gcc::tensor_slot past_the_end[] = {{0, 32, 0}, {32, 33, 0}};
  const std::vector<broken> cases = {
      {[](auto& c) { c.fragments = 0; }, "fragments must be 1..sync_every"},
      {[](auto& c) { c.fragments = 5; }, "fragments must be 1..sync_every"},
      {[](auto& c) {
         c.reduce.tensors = one_tensor;
         c.fragments = 2;
       },
       "fragments exceed the model's tensors"},
      {[](auto& c) {
         c.fragments = 2;
         c.delay = 3;
       },
       "delay exceeds sync_every / fragments"},
      {[](auto& c) { c.mix = 2.0f; }, "mix is not in [0, 1]"},
      {[](auto& c) { c.momentum = 1.0f; }, "momentum is not in [0, 1)"},
      {[](auto& c) { c.lr = INFINITY; }, "lr is not finite"},
      {[](auto& c) { c.participants = 3; }, "participants exceed the ranks"},
      {[](auto& c) { c.reduce.average = false; }, "reduce.average is false"},
      {[](auto& c) { c.reduce.tensors = past_the_end; }, "a tensor lies outside the parameters"},
  };
  for (const auto& k : cases) {
    auto st = gcc::run_threads(2, [&](gcc::communicator& c) -> status {
      auto cfg = outer("minmax:bits=4", 4);
      k.edit(cfg);
      auto theta = initial(64, c.rank());
      gcc::outer_state state;
      return gcc::outer_init(c, cfg, gc::view(theta), state);
    });
    for (const auto& s : st) {
      EXPECT_FALSE(s.ok()) << k.rule;
      EXPECT_EQ(std::string(s.message()), st[0].message()) << k.rule;
      EXPECT_NE(std::string(s.message()).find(k.rule), std::string::npos)
          << "expected '" << k.rule << "' in: " << s.message();
    }
  }
}

TEST(Outer, ANonFiniteDeltaIsTheSameErrorOnEveryRankAndChangesNothing) {
  std::vector<std::vector<float>> globals;
  auto st = run_with(
      4, [](int) { return outer("topk:ratio=0.1", 3); }, 9, 3, 5, &globals);
  for (const auto& s : st) {
    EXPECT_EQ(s.code(), status_code::nonfinite_input) << s.message();
    EXPECT_EQ(std::string(s.message()), st[0].message());
  }
  EXPECT_NE(std::string(st[0].message()).find("rank 3"), std::string::npos) << st[0].message();
  ASSERT_EQ(globals.size(), 4u);
  for (const auto& g : globals) EXPECT_EQ(g, globals[0]);

  // Delayed: the sync's agreement runs on the engine's thread, so every rank learns it in
  // the call that would have applied it (after step 6 + 2), with nothing applied.
  globals.clear();
  auto late = run_with(
      4,
      [](int) {
        auto c = outer("topk:ratio=0.1", 3);
        c.delay = 2;
        return c;
      },
      12, 3, 5, &globals);
  for (const auto& s : late) {
    EXPECT_EQ(s.code(), status_code::nonfinite_input) << s.message();
    EXPECT_EQ(std::string(s.message()), late[0].message());
  }
  ASSERT_EQ(globals.size(), 4u);
  for (const auto& g : globals) EXPECT_EQ(g, globals[0]);
}

// Each rank is drawn with probability K/W, and the rescaled mean of the participants is
// on average the mean of every rank: over 400 rounds the average update is within 4
// standard errors of the full mean.
TEST(Outer, PartialParticipationIsUnbiased) {
  gcc::outer_config c = outer(nullptr, 1);
  c.participants = 2;
  const int w = 5, rounds = 4000;
  std::vector<int> drawn(w, 0);
  for (int k = 0; k < rounds; ++k) {
    int count = 0;
    for (int r = 0; r < w; ++r) {
      const bool in = gcc::outer_participates(c, w, r, static_cast<std::uint64_t>(k));
      drawn[r] += in;
      count += in;
    }
    ASSERT_EQ(count, 2);
  }
  const double p = 0.4, sd = std::sqrt(p * (1 - p) / rounds);
  for (int r = 0; r < w; ++r) EXPECT_NEAR(drawn[r] / double(rounds), p, 4 * sd) << "rank " << r;

  // The engine: Δ_r = r + 1 everywhere (θ_local = θ_global − Δ_r), lr 1, one sync per
  // seed: the update is (W/K)·(1/W)·Σ_{r∈S} Δ_r, on average mean(Δ) = 3.
  const int seeds = 300;
  std::vector<double> updates;
  for (int s = 0; s < seeds; ++s) {
    c.seed = static_cast<std::uint64_t>(s);
    std::vector<float> moved(w);
    auto st = gcc::run_threads(w, [&](gcc::communicator& comm) -> status {
      std::vector<float> theta(4, 0.0f);
      gcc::outer_state state;
      gcc::outer_workspace ws;
      if (auto e = gcc::outer_init(comm, c, gc::view(theta), state); !e.ok()) return e;
      for (float& x : theta) x = -static_cast<float>(comm.rank() + 1);
      if (auto e = gcc::outer_step(comm, c, gc::view(theta), state, ws); !e.ok()) return e;
      moved[static_cast<std::size_t>(comm.rank())] = -state.global[0];
      return {};
    });
    ASSERT_TRUE(all_ok(st)) << messages(st);
    for (int r = 1; r < w; ++r) ASSERT_EQ(moved[r], moved[0]);
    updates.push_back(moved[0]);
  }
  double mean = 0, var = 0;
  for (double u : updates) mean += u / seeds;
  for (double u : updates) var += (u - mean) * (u - mean) / (seeds - 1);
  EXPECT_NEAR(mean, 3.0, 4 * std::sqrt(var / seeds));
  EXPECT_GT(var, 0.1);  // the subsets did differ
}

// Two nodes of two ranks: the ranks of a node average their gradients every step
// (outer_node_mean), the leaders reduce Δ compressed; every rank ends with the same θ.
TEST(Outer, HierarchicalRunsDenseInsideANodeAndCompressedBetweenNodes) {
  const std::uint64_t n = 300;
  auto cfg = outer("minmax:bits=4", 4);
  std::vector<std::vector<float>> globals(4);
  auto st = gcc::run_threads(4, [&](gcc::communicator& c) -> status {
    gcc::hierarchy h;
    if (auto s = gcc::make_hierarchy(c, c.rank() / 2, h); !s.ok()) return s;
    auto theta = initial(n, 0);
    gcc::outer_state state;
    gcc::outer_workspace ws;
    if (auto s = gcc::outer_init(c, cfg, gc::view(theta), state); !s.ok()) return s;
    for (int t = 0; t < 12; ++t) {
      std::vector<float> g(n);
      for (std::uint64_t j = 0; j < n; ++j) g[j] = theta[j] - target(c.rank(), j);
      if (auto s = gcc::outer_node_mean(h, gc::view(g), ws); !s.ok()) return s;
      for (std::uint64_t j = 0; j < n; ++j) theta[j] = std::fma(-inner_lr, g[j], theta[j]);
      if (auto s = gcc::outer_step(h, cfg, gc::view(theta), state, ws); !s.ok()) return s;
    }
    globals[static_cast<std::size_t>(c.rank())] = state.global;
    return {};
  });
  ASSERT_TRUE(all_ok(st)) << messages(st);
  for (int r = 1; r < 4; ++r) EXPECT_EQ(globals[r], globals[0]) << "rank " << r;
  EXPECT_NE(globals[0], initial(n, 0));
}

}  // namespace
