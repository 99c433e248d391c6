// SPDX-License-Identifier: Apache-2.0
// The cost model, the planner and the calibration (comm/cost_model.hpp, plan.hpp,
// calibrate.hpp): the model's bytes and collectives against what the strategies really
// hand to a communicator, the planner's choices on hand-made profiles, the same plan on
// every rank after the agreement, the profile's JSON form, and a calibration run.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "comm_test_util.hpp"
#include "gradcodec/comm/calibrate.hpp"
#include "gradcodec/comm/drift.hpp"
#include "gradcodec/comm/plan.hpp"
#include "gradcodec/comm/thread_communicator.hpp"
#include "gradcodec/powersgd.hpp"

namespace {

using namespace comm_test;
using gc::status;
using gc::status_code;

gc::codec_spec spec(const char* text) { return gc::parse_spec(text).value(); }

//! Forwards to another communicator and counts, as the cost model does, the bytes this
//! rank sends to the others and the collectives it takes part in.
class counting_communicator final : public gcc::communicator {
 public:
  explicit counting_communicator(gcc::communicator& inner) : inner_(inner) {}

  [[nodiscard]] int rank() const noexcept override { return inner_.rank(); }
  [[nodiscard]] int size() const noexcept override { return inner_.size(); }
  [[nodiscard]] std::string_view name() const noexcept override { return "counting"; }

  status iallgatherv(const void* send, std::uint64_t send_bytes, void* recv,
                     std::span<const std::uint64_t> recv_bytes, gcc::request& req) override {
    wire += static_cast<std::uint64_t>(size() - 1) * send_bytes;
    ++collectives;
    return inner_.iallgatherv(send, send_bytes, recv, recv_bytes, req);
  }
  status ialltoallv(const void* send, std::span<const std::uint64_t> send_bytes, void* recv,
                    std::span<const std::uint64_t> recv_bytes, gcc::request& req) override {
    for (int d = 0; d < size(); ++d)
      if (d != rank()) wire += send_bytes[static_cast<std::size_t>(d)];
    ++collectives;
    return inner_.ialltoallv(send, send_bytes, recv, recv_bytes, req);
  }
  status iallreduce(const void* send, void* recv, std::uint64_t count, gcc::element_type type,
                    gcc::reduce_op op, gcc::request& req) override {
    ++collectives;  // the configuration check: the model counts its time, not its bytes
    return inner_.iallreduce(send, recv, count, type, op, req);
  }
  status ibroadcast(void* buf, std::uint64_t bytes, int root, gcc::request& req) override {
    // As a large broadcast usually runs: a scatter from the root, then a ring allgather.
    const auto w = static_cast<std::uint64_t>(size());
    wire += (rank() == root ? 2 : 1) * (w - 1) * bytes / w;
    ++collectives;
    return inner_.ibroadcast(buf, bytes, root, req);
  }
  status wait(gcc::request& req) override { return inner_.wait(req); }
  status barrier() override { return inner_.barrier(); }
  status split(int color, int key, std::unique_ptr<gcc::communicator>& out) override {
    return inner_.split(color, key, out);
  }

  std::uint64_t wire = 0, collectives = 0;

 private:
  gcc::communicator& inner_;
};

//! A profile with plausible costs for every spec given (1 ns per element per operation,
//! 10 µs per call) over a uniform link.
gcc::cost_profile hand_profile(const std::vector<gc::codec_spec>& specs, double bytes_per_s,
                               double latency_s = 50e-6) {
  gcc::cost_profile p;
  p.link = gcc::link_profile::uniform(latency_s, bytes_per_s);
  p.compute.copy = {1e-6, 0.25e-9};
  for (const gc::codec_spec& s : specs) {
    gcc::codec_costs c;
    c.spec = s;
    c.encode = c.encode_with_feedback = c.decode = c.decode_accumulate = {10e-6, 1e-9};
    p.compute.codecs.push_back(c);
  }
  return p;
}

std::vector<gc::codec_spec> every_codec() {
  std::vector<gc::codec_spec> v;
  for (const char* t : {"topk", "dgc", "randomk", "qsgd", "terngrad", "minmax", "onebit",
                        "sign:scale=mean", "fp16", "bf16", "powersgd:rank=2"})
    v.push_back(spec(t));
  return v;
}

//! What one allreduce call of `cfg` over W thread ranks hands to the communicator: the
//! bytes of the rank sending most and the collectives of rank 0 (the cost model's
//! wire_bytes and collectives). rows: the input's PowerSGD matrix rows.
struct counted {
  std::uint64_t wire = 0, collectives = 0;
};
counted count_a_call(int world, gcc::allreduce_config cfg, std::uint64_t n, std::uint64_t rows) {
  cfg.where = gc::backend::reference;
  std::vector<std::uint64_t> wire(static_cast<std::size_t>(world)),
      calls(static_cast<std::size_t>(world));
  auto st = gcc::run_threads(world, [&](gcc::communicator& inner) -> status {
    counting_communicator comm(inner);
    std::vector<float> g = make_grad(n, comm.rank(), 0, 1.0f), out(n);
    gcc::allreduce_state state;
    gcc::workspace ws;
    const gc::const_tensor_view in{g.data(), n, gc::dtype::f32, rows};
    status s = gcc::allreduce(comm, cfg, {1, 0, 0}, in, gc::view(out), state, ws);
    wire[static_cast<std::size_t>(comm.rank())] = comm.wire;
    calls[static_cast<std::size_t>(comm.rank())] = comm.collectives;
    return s;
  });
  EXPECT_TRUE(all_ok(st)) << messages(st);
  return {*std::max_element(wire.begin(), wire.end()), calls[0]};
}

// For every codec, strategy, segment length and rank count, the model's bytes and
// collectives are those the strategy hands to the communicator (the rank sending most).
TEST(CostModel, WireBytesAndCollectivesMatchTheStrategies) {
  const std::vector<gc::codec_spec> specs = every_codec();
  const gcc::cost_profile profile = hand_profile(specs, 1e9);
  for (int world : {2, 3}) {
    for (std::uint64_t n : {std::uint64_t{3 * 4096 + 100}, std::uint64_t{4096}}) {
      std::vector<gcc::candidate> cands;
      cands.push_back({true, spec("bf16"), gcc::strategy::dense, false, 0, false});
      for (const gc::codec_spec& s : specs)
        for (gcc::strategy how : {gcc::strategy::allgather, gcc::strategy::two_phase,
                                  gcc::strategy::dense, gcc::strategy::majority_vote})
          if (gcc::supported_strategies(s.id).contains(how))
            for (std::uint64_t seg : {std::uint64_t{0}, std::uint64_t{4096}})
              cands.push_back({false, s, how, false, seg, true});
      for (const gcc::candidate& c : cands) {
        SCOPED_TRACE(gcc::describe(c) + " W=" + std::to_string(world) + " n=" + std::to_string(n));
        auto predicted = gcc::predict(c, n, world, profile);
        ASSERT_TRUE(predicted.ok()) << predicted.error().message();
        // PowerSGD factorises the flat bucket as the model does: a near-square matrix.
        const std::uint64_t rows =
            c.spec.id == gc::codec_id::powersgd ? gc::powersgd_square_rows(n) : 0;
        const counted sent = count_a_call(world, gcc::config_of(c), n, rows);
        EXPECT_EQ(predicted.value().wire_bytes, sent.wire);
        EXPECT_EQ(predicted.value().collectives, sent.collectives);
      }
    }
  }
}

// PowerSGD over tensor slots (the DDP hook's and the bench's layouts): the model's bytes
// and collectives are the strategy's, with gaps sent as vectors and a matrix too small to
// factorise sent dense.
TEST(CostModel, PowerSgdTensorsMatchTheStrategies) {
  const gc::codec_spec psgd = spec("powersgd:rank=2");
  const gcc::cost_profile profile = hand_profile({psgd, spec("bf16")}, 1e9);
  // 8 gap | 64 x 48 | 4 x 4 (not factorised) | 40 gap | 96 x 32 | 20 tail
  const std::vector<gcc::tensor_slot> tensors = {
      {8, 64 * 48, 64}, {8 + 64 * 48, 16, 4}, {8 + 64 * 48 + 16 + 40, 96 * 32, 96}};
  const std::uint64_t n = tensors.back().offset + tensors.back().n + 20;
  ASSERT_FALSE(gc::powersgd_compresses(psgd, 4, 4));
  for (int world : {2, 3})
    for (gcc::strategy how : {gcc::strategy::allgather, gcc::strategy::dense}) {
      const gcc::candidate c{false, psgd, how, false, 0, true};
      SCOPED_TRACE(gcc::describe(c) + " W=" + std::to_string(world));
      auto predicted = gcc::predict(c, n, world, profile, tensors);
      ASSERT_TRUE(predicted.ok()) << predicted.error().message();
      auto square = gcc::predict(c, n, world, profile);
      ASSERT_TRUE(square.ok());
      EXPECT_NE(predicted.value().wire_bytes, square.value().wire_bytes);
      gcc::allreduce_config cfg = gcc::config_of(c);
      cfg.tensors = tensors;
      const counted sent = count_a_call(world, cfg, n, 0);
      EXPECT_EQ(predicted.value().wire_bytes, sent.wire);
      EXPECT_EQ(predicted.value().collectives, sent.collectives);
    }
  // Slots the call would refuse are refused here too.
  const std::vector<gcc::tensor_slot> overlapping = {{0, 64, 8}, {32, 64, 8}};
  EXPECT_EQ(gcc::predict({false, psgd, gcc::strategy::dense, false, 0, true}, 256, 2, profile,
                         overlapping)
                .error()
                .code(),
            gc::status_code::invalid_argument);
}

// A hierarchical call's leader (world rank 0) sends what predict_hierarchical says, in as
// many collectives: the node's reduction to it, the leaders' strategy, the broadcasts.
TEST(CostModel, HierarchicalWireBytesAndCollectivesMatchTheLeader) {
  const std::vector<gc::codec_spec> specs = {spec("minmax:bits=4"), spec("fp16"), spec("qsgd")};
  gcc::cost_profile profile = hand_profile(specs, 1e9);
  profile.intra = gcc::link_profile::uniform(5e-6, 1e10);
  const std::uint64_t n = 6 * 4096;
  for (const gcc::node_layout layout : {gcc::node_layout{2, 2}, gcc::node_layout{2, 3},
                                        gcc::node_layout{3, 2}, gcc::node_layout{1, 3}}) {
    std::vector<gcc::candidate> cands;
    cands.push_back({true, spec("bf16"), gcc::strategy::dense, false, 0, false});
    cands.push_back({false, spec("minmax:bits=4"), gcc::strategy::allgather, false, 0, true});
    cands.push_back({false, spec("minmax:bits=4"), gcc::strategy::two_phase, false, 0, true});
    cands.push_back({false, spec("fp16"), gcc::strategy::dense, false, 0, true});
    cands.push_back({false, spec("qsgd"), gcc::strategy::two_phase, false, 0, true});
    for (const gcc::candidate& c : cands) {
      SCOPED_TRACE(gcc::describe(c) + " nodes=" + std::to_string(layout.nodes) +
                   " per node=" + std::to_string(layout.per_node));
      auto predicted = gcc::predict_hierarchical(c, n, layout, profile);
      ASSERT_TRUE(predicted.ok()) << predicted.error().message();
      std::uint64_t wire = 0, calls = 0;
      auto st = gcc::run_threads(layout.nodes * layout.per_node, [&](gcc::communicator& inner) {
        gcc::hierarchy made;
        if (status s = gcc::make_hierarchy(inner, inner.rank() / layout.per_node, made); !s.ok())
          return s;
        counting_communicator world(inner);
        gcc::hierarchy h;
        h.world = &world;
        h.intra = std::make_unique<counting_communicator>(*made.intra);
        if (made.inter) h.inter = std::make_unique<counting_communicator>(*made.inter);
        gcc::allreduce_config cfg = gcc::config_of(c);
        cfg.where = gc::backend::reference;
        std::vector<float> g = make_grad(n, inner.rank(), 0, 1.0f), out(n);
        gcc::allreduce_state state;
        gcc::workspace ws;
        status s = gcc::allreduce(h, cfg, {1, 0, 0}, {g.data(), n, gc::dtype::f32, 0},
                                  gc::view(out), state, ws);
        if (inner.rank() == 0) {
          const auto* intra = static_cast<counting_communicator*>(h.intra.get());
          const auto* inter = static_cast<counting_communicator*>(h.inter.get());
          wire = world.wire + intra->wire + (inter ? inter->wire : 0);
          calls = world.collectives + intra->collectives + (inter ? inter->collectives : 0);
        }
        return s;
      });
      ASSERT_TRUE(all_ok(st)) << messages(st);
      EXPECT_EQ(predicted.value().wire_bytes, wire);
      EXPECT_EQ(predicted.value().collectives, calls);
    }
  }
  // Without an intra-node link there is nothing to predict with.
  profile.intra.reset();
  EXPECT_EQ(gcc::predict_hierarchical(gcc::candidate{}, n, {2, 2}, profile).error().code(),
            status_code::invalid_argument);
}

TEST(CostModel, CollectiveFormulas) {
  const gcc::link_profile l = gcc::link_profile::uniform(1e-4, 1e8);
  // Ring: 2(W-1) rounds, 2(W-1)/W of the buffer sent.
  EXPECT_DOUBLE_EQ(gcc::ring_allreduce_seconds(l, 4, 4'000'000), 6 * 1e-4 + 1.5 * 4e6 / 1e8);
  EXPECT_DOUBLE_EQ(gcc::allgather_seconds(l, 3, 1000), 2 * 1e-4 + 2000 / 1e8);
  EXPECT_DOUBLE_EQ(gcc::alltoall_seconds(l, 5, 1000), 4 * 1e-4 + 4000 / 1e8);
  EXPECT_EQ(gcc::ring_allreduce_seconds(l, 1, 1 << 20), 0.0);
  EXPECT_EQ(gcc::allgather_seconds(l, 1, 1 << 20), 0.0);
}

TEST(CostModel, PipeliningHidesOnlyWhatTheLinkOverlaps) {
  gcc::cost_profile p = hand_profile({spec("minmax")}, 1.25e8);
  gcc::candidate c{false, spec("minmax"), gcc::strategy::two_phase, false, 1 << 18, true};
  const std::uint64_t n = 1 << 22;
  const double off = gcc::predict(c, n, 4, p).value().total_s;
  c.pipeline = true;
  EXPECT_EQ(gcc::predict(c, n, 4, p).value().total_s, off);  // overlap 0: nothing hidden
  p.link.overlap = 1;
  const gcc::prediction on = gcc::predict(c, n, 4, p).value();
  EXPECT_GT(on.hidden_s, 0);
  EXPECT_LT(on.total_s, off);
  EXPECT_GE(on.total_s, std::max(on.compute_s, on.transfer_s) - 1e-12);
}

// A collective after idle time sends its first burst bytes at once; computation refills the
// allowance at the link's rate.
TEST(CostModel, ABurstAllowanceIsSpentFirstAndRefilledByComputation) {
  gcc::cost_profile p = hand_profile({spec("minmax")}, 1e8, 0);
  gcc::candidate c{false, spec("minmax"), gcc::strategy::allgather, false, 0, true};
  const std::uint64_t n = 1 << 20;
  const gcc::prediction plain = gcc::predict(c, n, 2, p).value();
  ASSERT_GT(plain.transfer_s, 0);
  p.link.burst_bytes = 1e9;  // more than the frame: the one exchange waits for nothing
  const double check = gcc::ring_allreduce_seconds(p.link, 2, 24);  // the configuration check
  EXPECT_DOUBLE_EQ(gcc::predict(c, n, 2, p).value().transfer_s, check);
  // Four segments: the first is free, the others only as far as the encode between
  // them (about 1 ms at 1 ns per element, 0.1 MB at this rate) refilled the allowance.
  c.segment_elements = n / 4;
  const double segmented = gcc::predict(c, n, 2, p).value().transfer_s;
  p.link.burst_bytes = 0;
  const double none = gcc::predict(c, n, 2, p).value().transfer_s;
  EXPECT_GT(segmented, 0);
  EXPECT_LT(segmented, none * 0.75);
  EXPECT_EQ(gcc::predict(c, n, 2, p).value().wire_bytes,
            gcc::predict(c, n, 2,
                         [&] {
                           gcc::cost_profile q = p;
                           q.link.burst_bytes = 1e9;
                           return q;
                         }())
                .value()
                .wire_bytes);  // the bytes do not change, only when they wait
}

TEST(CostModel, InCallFactorsScaleComputeAndAddWaits) {
  gcc::cost_profile p = hand_profile({spec("minmax")}, 1e8);
  const gcc::candidate c{false, spec("minmax"), gcc::strategy::two_phase, false, 0, true};
  const gcc::prediction plain = gcc::predict_uncorrected(c, 1 << 20, 4, p).value();
  EXPECT_EQ(gcc::predict(c, 1 << 20, 4, p).value().total_s, plain.total_s);  // no factors yet
  p.compute.codecs[0].in_call = {{gcc::strategy::allgather, false, 5, 5},
                                 {gcc::strategy::two_phase, true, 7, 7},
                                 {gcc::strategy::two_phase, false, 2, 0.5}};
  const gcc::prediction scaled = gcc::predict(c, 1 << 20, 4, p).value();
  EXPECT_DOUBLE_EQ(scaled.compute_s, 2 * plain.compute_s);
  EXPECT_DOUBLE_EQ(scaled.transfer_s, plain.transfer_s + 0.5 * scaled.compute_s);
  // A negative wait (the link did better than predicted) never goes below the check.
  p.compute.codecs[0].in_call[2].wait = -1e6;
  const double check = gcc::ring_allreduce_seconds(p.link, 4, 24);  // 3 u64 (docs/comm.md)
  EXPECT_DOUBLE_EQ(gcc::predict(c, 1 << 20, 4, p).value().transfer_s, check);
  EXPECT_EQ(scaled.wire_bytes, plain.wire_bytes);
  // A pipelined call with several segments takes the pipelined factors.
  gcc::candidate piped = c;
  piped.pipeline = true;
  piped.segment_elements = 1 << 18;
  const double piped_plain = gcc::predict_uncorrected(piped, 1 << 20, 4, p).value().compute_s;
  EXPECT_DOUBLE_EQ(gcc::predict(piped, 1 << 20, 4, p).value().compute_s, 7 * piped_plain);
}

TEST(CostModel, RefusesWhatItCannotPredict) {
  const gcc::cost_profile p = hand_profile({spec("minmax")}, 1e9);
  auto missing =
      gcc::predict({false, spec("topk"), gcc::strategy::two_phase, false, 0, true}, 100, 2, p);
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(std::string(missing.error().message()).find("topk"), std::string::npos);
  auto unsupported =
      gcc::predict({false, spec("minmax"), gcc::strategy::dense, false, 0, true}, 100, 2, p);
  ASSERT_FALSE(unsupported.ok());
  EXPECT_EQ(unsupported.error().code(), status_code::invalid_argument);
  EXPECT_FALSE(gcc::predict({}, 100, 0, p).ok());
}

TEST(Plan, CompressesOnASlowLinkAndStaysDenseOnAFastOne) {
  gcc::plan_request req;
  req.elements = 1 << 22;
  req.ranks = 4;
  req.accept = {spec("minmax:bits=4"), spec("topk")};
  const std::vector<gc::codec_spec> specs{spec("minmax:bits=4"), spec("topk"), spec("bf16")};

  auto slow = gcc::plan(req, hand_profile(specs, 12.5e6));  // 100 Mbit/s
  ASSERT_TRUE(slow.ok()) << slow.error().message();
  EXPECT_FALSE(slow.value().choice().config.uncompressed);
  EXPECT_NE(slow.value().choice().config.spec.id, gc::codec_id::bf16);
  EXPECT_EQ(slow.value().chosen, 0u);

  auto fast = gcc::plan(req, hand_profile(specs, 1e12));  // a link faster than any encode
  ASSERT_TRUE(fast.ok());
  const gcc::candidate& c = fast.value().choice().config;
  EXPECT_TRUE(c.uncompressed || c.spec.id == gc::codec_id::bf16) << gcc::describe(c);
  EXPECT_NE(fast.value().reason.find("dense"), std::string::npos) << fast.value().reason;

  // Every row is sorted, and the configuration of the choice is what was chosen.
  for (std::size_t i = 1; i < slow.value().rows.size(); ++i)
    EXPECT_LE(slow.value().rows[i - 1].predicted.total_s, slow.value().rows[i].predicted.total_s);
  const gcc::allreduce_config cfg = slow.value().config();
  EXPECT_EQ(cfg.spec, slow.value().choice().config.spec);
  EXPECT_EQ(cfg.how, slow.value().choice().config.how);
}

TEST(Plan, TheMarginKeepsDenseWhenCompressionBarelyWins) {
  gcc::plan_request req;
  req.elements = 1 << 20;
  req.ranks = 2;
  req.accept = {spec("minmax:bits=4")};
  req.margin = 0;
  const gcc::cost_profile p = hand_profile({spec("minmax:bits=4"), spec("bf16")}, 2e8);
  auto free = gcc::plan(req, p).value();
  const gcc::plan_row& fastest = free.rows.front();
  const gcc::plan_row& dense = free.rows[free.best_dense];
  ASSERT_EQ(fastest.config.spec.id, gc::codec_id::minmax) << free.reason;
  const double gain = 1 - fastest.predicted.total_s / dense.predicted.total_s;
  ASSERT_GT(gain, 0);
  req.margin = std::min(0.99, gain * 1.01);
  auto guarded = gcc::plan(req, p).value();
  EXPECT_EQ(guarded.chosen, guarded.best_dense);
  EXPECT_NE(guarded.reason.find("does not pay"), std::string::npos) << guarded.reason;
  req.margin = gain * 0.99;
  EXPECT_EQ(gcc::plan(req, p).value().chosen, 0u);
}

// Every configuration the planner can emit is one allreduce accepts and runs.
TEST(Plan, EveryCandidateRuns) {
  gcc::plan_request req;
  req.elements = 3000;
  req.ranks = 2;
  req.accept = every_codec();
  req.segments = {0, 1024};
  auto planned = gcc::plan(req, hand_profile(req.accept, 1e9));
  ASSERT_TRUE(planned.ok()) << planned.error().message();
  for (std::size_t i = 0; i < planned.value().rows.size(); ++i) {
    gcc::plan_result one = planned.value();
    one.chosen = i;
    gcc::allreduce_config cfg = one.config();
    cfg.where = gc::backend::reference;
    SCOPED_TRACE(gcc::describe(one.choice().config));
    auto st = gcc::run_threads(2, [&](gcc::communicator& comm) -> status {
      std::vector<float> g = make_grad(req.elements, comm.rank(), 0, 1.0f), out(req.elements);
      gcc::allreduce_state state;
      gcc::workspace ws;
      return gcc::allreduce(comm, cfg, {1, 0, 0}, gc::view(g), gc::view(out), state, ws);
    });
    EXPECT_TRUE(all_ok(st)) << messages(st);
  }
}

TEST(Plan, ExcludedConfigurationsAreNeverCandidates) {
  gcc::plan_request req;
  req.elements = 1 << 20;
  req.ranks = 4;
  req.accept = {spec("minmax:bits=4"), spec("threshold")};
  req.excluded = {{gc::codec_id::threshold, gcc::strategy::two_phase},
                  {gc::codec_id::minmax, gcc::strategy::allgather}};
  auto planned = gcc::plan(
      req, hand_profile({spec("minmax:bits=4"), spec("threshold"), spec("bf16")}, 12.5e6));
  ASSERT_TRUE(planned.ok()) << planned.error().message();
  std::size_t threshold_rows = 0, minmax_rows = 0;
  for (const gcc::plan_row& r : planned.value().rows) {
    if (r.config.uncompressed) continue;
    if (r.config.spec.id == gc::codec_id::threshold) {
      ++threshold_rows;
      EXPECT_NE(r.config.how, gcc::strategy::two_phase);
    }
    if (r.config.spec.id == gc::codec_id::minmax) {
      ++minmax_rows;
      EXPECT_NE(r.config.how, gcc::strategy::allgather);
    }
  }
  EXPECT_GT(threshold_rows, 0u);  // the rest of each codec stays
  EXPECT_GT(minmax_rows, 0u);
}

TEST(Plan, RefusesBadRequests) {
  gcc::plan_request req;
  req.elements = 100;
  req.ranks = 0;
  EXPECT_FALSE(gcc::plan(req, hand_profile({spec("bf16")}, 1e9)).ok());
  req.ranks = 2;
  req.margin = 1;
  EXPECT_FALSE(gcc::plan(req, hand_profile({spec("bf16")}, 1e9)).ok());
  req.margin = 0.05;
  auto no_bf16 = gcc::plan(req, hand_profile({}, 1e9));
  ASSERT_FALSE(no_bf16.ok());
  EXPECT_NE(std::string(no_bf16.error().message()).find("bf16"), std::string::npos);
}

//! The profile's numbers as bits, for exact comparisons.
std::string fingerprint(const gcc::cost_profile& p) { return gcc::profile_to_json(p); }

// Ranks whose measurements differ hold the same profile after the agreement (each number's
// median over the ranks), and so make the same plan.
TEST(Plan, IsTheSameOnEveryRankAfterTheAgreement) {
  constexpr int world = 3;
  std::vector<std::string> profiles(world), plans(world);
  std::vector<gcc::cost_profile> agreed(world);
  auto st = gcc::run_threads(world, [&](gcc::communicator& comm) -> status {
    const int r = comm.rank();
    gcc::cost_profile p = hand_profile({spec("minmax:bits=4"), spec("topk"), spec("bf16")},
                                       1e8 * (1 + 0.1 * r), 40e-6 * (3 - r));
    for (gcc::codec_costs& c : p.compute.codecs) c.encode.per_element_s *= 1 + 0.3 * r;
    p.link.overlap = 0.2 + 0.1 * r;
    p.link.burst_bytes = 1000.0 * (r + 1);
    if (status s = gcc::agree_profile(comm, p); !s.ok()) return s;
    gcc::plan_request req;
    req.elements = 1 << 22;
    req.ranks = world;
    req.accept = {spec("minmax:bits=4"), spec("topk")};
    auto planned = gcc::plan(req, p);
    if (!planned.ok()) return planned.error();
    std::string digest;
    for (const gcc::plan_row& row : planned.value().rows)
      digest += gcc::describe(row.config) + "=" +
                std::to_string(std::bit_cast<std::uint64_t>(row.predicted.total_s)) + ";";
    profiles[static_cast<std::size_t>(r)] = fingerprint(p);
    plans[static_cast<std::size_t>(r)] = digest + planned.value().reason;
    agreed[static_cast<std::size_t>(r)] = p;
    return {};
  });
  ASSERT_TRUE(all_ok(st)) << messages(st);
  for (int r = 1; r < world; ++r) {
    EXPECT_EQ(profiles[0], profiles[static_cast<std::size_t>(r)]);
    EXPECT_EQ(plans[0], plans[static_cast<std::size_t>(r)]);
  }
  const gcc::cost_profile& p = agreed[0];
  EXPECT_EQ(p.ranks, world);
  // Rank r measured 1 + 0.1 r, 3 - r, 0.2 + 0.1 r, ...: the medians are rank 1's values.
  EXPECT_DOUBLE_EQ(p.link.allgather.bytes_per_s, 1e8 * 1.1);
  EXPECT_DOUBLE_EQ(p.link.allgather.step_latency_s, 80e-6);
  EXPECT_DOUBLE_EQ(p.link.overlap, 0.2 + 0.1);
  EXPECT_DOUBLE_EQ(p.link.burst_bytes, 2000.0);
  EXPECT_DOUBLE_EQ(p.compute.codecs[0].encode.per_element_s, 1e-9 * 1.3);
}

TEST(Calibrate, DifferentCodecListsFailOnEveryRank) {
  auto st = gcc::run_threads(2, [&](gcc::communicator& comm) -> status {
    gcc::cost_profile p =
        hand_profile({comm.rank() == 0 ? spec("minmax") : spec("topk"), spec("bf16")}, 1e9);
    return gcc::agree_profile(comm, p);
  });
  for (const status& s : st) EXPECT_EQ(s.code(), status_code::comm_error) << s.message();
}

TEST(Calibrate, ProfileJsonReadsBackExactly) {
  gcc::cost_profile p = hand_profile(every_codec(), 1.0 / 3.0 * 1e8, 1.0 / 7.0 * 1e-4);
  p.ranks = 4;
  p.link.overlap = 0.123456789012345678;
  p.link.burst_bytes = 250000;
  p.compute.codecs[0].frame_bytes_per_element = 0.1;
  p.compute.codecs[0].in_call = {{gcc::strategy::allgather, false, 1.0 / 3, 2.5},
                                 {gcc::strategy::two_phase, true, 0.5, -0.75}};
  const std::string text = gcc::profile_to_json(p);
  auto back = gcc::profile_from_json(text);
  ASSERT_TRUE(back.ok()) << back.error().message();
  EXPECT_EQ(gcc::profile_to_json(back.value()), text);
  EXPECT_EQ(back.value().link.overlap, p.link.overlap);
  EXPECT_EQ(back.value().link.allgather.bytes_per_s, p.link.allgather.bytes_per_s);
  ASSERT_EQ(back.value().compute.codecs.size(), p.compute.codecs.size());
  EXPECT_EQ(back.value().compute.codecs[0].spec, p.compute.codecs[0].spec);

  struct bad {
    std::string text;
    const char* names;
  };
  const auto replace = [&](const std::string& from, const std::string& to) {
    std::string t = text;
    t.replace(t.find(from), from.size(), to);
    return t;
  };
  const std::vector<bad> cases{
      {replace("gradcodec-cost-profile", "something-else"), "format"},
      {replace("\"version\": 1", "\"version\": 2"), "version"},
      {replace("\"overlap\"", "\"overlapp\""), "link.overlap"},
      {replace("\"fixed_s\": 1", "\"fixed_s\": -1"), "fixed_s"},
      {replace("\"spec\": \"topk", "\"spec\": \"nosuchcodec"), "codecs[0].spec"},
      {text.substr(0, text.size() / 2), "offset"},
      {text + "x", "trailing"},
      {replace("\"strategy\": \"two_phase\"", "\"strategy\": \"dense\""), "in_call[1]"},
  };
  for (const bad& b : cases) {
    auto r = gcc::profile_from_json(b.text);
    ASSERT_FALSE(r.ok()) << b.names;
    EXPECT_EQ(r.error().code(), status_code::invalid_argument);
    EXPECT_NE(std::string(r.error().message()).find(b.names), std::string::npos)
        << r.error().message();
  }
  // An error in the intra-node link names that link.
  gcc::cost_profile two_level = p;
  two_level.intra = p.link;
  two_level.intra->overlap = 1.5;
  auto r = gcc::profile_from_json(gcc::profile_to_json(two_level));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(std::string(r.error().message()).find("intra_link.overlap must be <= 1"),
            std::string::npos)
      << r.error().message();
}

// A calibration over two thread ranks: every codec measured, bf16 added, the link fitted,
// and both ranks holding the same profile. (Its values are timings, checked only for being
// usable: positive and finite.)
//! A calibration of small sizes and few repeats, for the tests.
gcc::calibrate_options quick_options(std::vector<gc::codec_spec> specs) {
  gcc::calibrate_options opt;
  opt.specs = std::move(specs);
  opt.small_elements = 1024;
  opt.large_elements = 16384;
  opt.seconds_per_point = 0.001;
  opt.small_bytes = 256;
  opt.large_bytes = 65536;
  opt.link_repeats = 2;
  opt.in_call_elements = 8192;
  opt.in_call_segment = 2048;
  opt.in_call_repeats = 1;
  return opt;
}

// Two nodes of two ranks: the profile gains the intra-node link, the same on every rank,
// and plans hierarchical calls.
TEST(Calibrate, AHierarchyMeasuresBothLinks) {
  gcc::calibrate_options opt = quick_options({spec("minmax:bits=4")});
  opt.in_call_repeats = 0;
  std::vector<std::string> json(4);
  auto st = gcc::run_threads(4, [&](gcc::communicator& comm) -> status {
    gcc::hierarchy h;
    if (status s = gcc::make_hierarchy(comm, comm.rank() / 2, h); !s.ok()) return s;
    auto p = gcc::calibrate(h, opt);
    if (!p.ok()) return p.error();
    if (!p.value().intra) return {status_code::internal_error, "no intra-node link"};
    json[static_cast<std::size_t>(comm.rank())] = gcc::profile_to_json(p.value());
    gcc::plan_request req;
    req.elements = 1 << 16;
    req.ranks = 4;
    req.nodes = gcc::node_layout{2, 2};
    req.accept = opt.specs;
    return gcc::plan(req, p.value()).ok() ? status{} : status{status_code::internal_error, "plan"};
  });
  ASSERT_TRUE(all_ok(st)) << messages(st);
  for (const std::string& j : json) EXPECT_EQ(j, json[0]);
  auto back = gcc::profile_from_json(json[0]);
  ASSERT_TRUE(back.ok()) << back.error().message();
  EXPECT_TRUE(back.value().intra.has_value());
  EXPECT_EQ(gcc::profile_to_json(back.value()), json[0]);
}

TEST(Calibrate, MeasuresEveryCodecAndTheLinkTheSameOnEveryRank) {
  const gcc::calibrate_options opt = quick_options(
      {spec("minmax:bits=4"), spec("topk"), spec("threshold:tau=0.001"), spec("powersgd:rank=2")});
  std::vector<std::string> json(2);
  std::vector<gcc::cost_profile> got(2);
  auto st = gcc::run_threads(2, [&](gcc::communicator& comm) -> status {
    auto p = gcc::calibrate(comm, opt);
    if (!p.ok()) return p.error();
    json[static_cast<std::size_t>(comm.rank())] = gcc::profile_to_json(p.value());
    got[static_cast<std::size_t>(comm.rank())] = p.value();
    return {};
  });
  ASSERT_TRUE(all_ok(st)) << messages(st);
  EXPECT_EQ(json[0], json[1]);
  const gcc::cost_profile& p = got[0];
  EXPECT_EQ(p.ranks, 2);
  ASSERT_EQ(p.compute.codecs.size(), 5u);
  EXPECT_EQ(p.compute.codecs.back().spec, spec("bf16"));
  for (const gcc::codec_costs& c : p.compute.codecs) {
    SCOPED_TRACE(gc::to_string(c.spec));
    for (const gcc::op_cost* o :
         {&c.encode, &c.encode_with_feedback, &c.decode, &c.decode_accumulate}) {
      EXPECT_TRUE(std::isfinite(o->at(opt.large_elements)));
      EXPECT_GT(o->at(opt.large_elements), 0);
    }
  }
  for (const gcc::codec_costs& c : p.compute.codecs) {  // per strategy and pipelining, from calls
    std::size_t strategies = 0;
    for (gcc::strategy how : {gcc::strategy::allgather, gcc::strategy::two_phase,
                              gcc::strategy::dense, gcc::strategy::majority_vote})
      strategies += gcc::supported_strategies(c.spec.id).contains(how) ? 1 : 0;
    const std::size_t per = c.spec.id == gc::codec_id::powersgd ? 1 : 2;
    ASSERT_EQ(c.in_call.size(), strategies * per) << gc::to_string(c.spec);
    for (const gcc::in_call_factor& f : c.in_call) {
      EXPECT_TRUE(gcc::supported_strategies(c.spec.id).contains(f.how));
      EXPECT_GT(f.compute, 0);
      EXPECT_TRUE(std::isfinite(f.wait));
    }
  }
  EXPECT_GT(p.compute.codecs[2].frame_bytes_per_element, 0);  // threshold's frames measured
  EXPECT_EQ(p.compute.codecs[0].frame_bytes_per_element, 0);
  for (const gcc::collective_cost* c : {&p.link.allgather, &p.link.alltoall, &p.link.allreduce}) {
    EXPECT_GT(c->bytes_per_s, 0);
    EXPECT_TRUE(std::isfinite(c->bytes_per_s));
    EXPECT_GE(c->step_latency_s, 0);
  }
  EXPECT_GE(p.link.overlap, 0);
  EXPECT_LE(p.link.overlap, 1);
  EXPECT_GE(p.link.burst_bytes, 0);
  // The measured profile plans.
  gcc::plan_request req;
  req.elements = 1 << 20;
  req.ranks = 2;
  req.accept = opt.specs;
  EXPECT_TRUE(gcc::plan(req, p).ok());
}

// --- drift (comm/drift.hpp) ----------------------------------------------------------

gcc::plan_row row_of(const char* text, gcc::strategy how, double predicted_s) {
  gcc::plan_row r;
  r.config.spec = spec(text);
  r.config.how = how;
  r.predicted.total_s = predicted_s;
  return r;
}

TEST(Drift, RunningRatioFollowsCallsAndRestartsWithANewRow) {
  gcc::drift_tracker d;  // ewma 0.2
  const gcc::plan_row a = row_of("minmax:bits=4", gcc::strategy::allgather, 0.010);
  EXPECT_FALSE(d.ratio(7).has_value());
  d.observe(7, a, 0.020);
  d.observe(7, a, 0.030);
  EXPECT_DOUBLE_EQ(*d.ratio(7), 0.8 * 2.0 + 0.2 * 3.0);
  EXPECT_DOUBLE_EQ(*d.seconds(7), 0.8 * 0.020 + 0.2 * 0.030);
  d.observe(7, row_of("minmax:bits=4", gcc::strategy::two_phase, 0.010), 0.005);
  EXPECT_DOUBLE_EQ(*d.ratio(7), 0.5);
}

TEST(Drift, ScalingTouchesWhatThePredictionCameFrom) {
  gcc::cost_profile p = hand_profile({spec("minmax:bits=4"), spec("bf16")}, 1e9);
  gcc::candidate mean;
  mean.uncompressed = true;
  ASSERT_TRUE(gcc::scale_for_drift(p, mean, 2.0).ok());
  EXPECT_DOUBLE_EQ(p.link.allreduce.bytes_per_s, 0.5e9);
  gcc::candidate mm = row_of("minmax:bits=4", gcc::strategy::two_phase, 1).config;
  ASSERT_TRUE(gcc::scale_for_drift(p, mm, 1.5).ok());  // no factor yet: one at 1, scaled
  const gcc::in_call_factor* f = p.compute.codecs[0].factor(gcc::strategy::two_phase, false);
  ASSERT_NE(f, nullptr);
  EXPECT_DOUBLE_EQ(f->compute, 1.5);
  ASSERT_TRUE(gcc::scale_for_drift(p, mm, 1e9).ok());
  EXPECT_DOUBLE_EQ(p.compute.codecs[0].factor(gcc::strategy::two_phase, false)->compute, 1e3);
  EXPECT_EQ(gcc::scale_for_drift(p, mm, 0.0).code(), status_code::invalid_argument);
  mm.spec = spec("qsgd");
  EXPECT_EQ(gcc::scale_for_drift(p, mm, 2.0).code(), status_code::invalid_argument);
}

// Three ranks time bucket 0 at 2.0, 2.1 and 2.2 times its prediction, bucket 1 close to
// it, and bucket 2 on rank 0 only: every rank re-plans bucket 0 alone, scaled by the
// median 2.1, and the profiles stay byte-identical.
TEST(Drift, RanksAgreeOnTheMedianAndReplanTheSameBuckets) {
  const gcc::cost_profile start = hand_profile({spec("minmax:bits=4"), spec("bf16")}, 1e8);
  std::vector<std::string> profiles(3);
  std::vector<std::vector<std::uint64_t>> again(3);
  std::vector<std::optional<double>> kept(3);
  auto st = gcc::run_threads(3, [&](gcc::communicator& comm) -> status {
    gcc::cost_profile p = start;
    gcc::plan_request req;
    req.elements = std::uint64_t{1} << 20;
    req.ranks = comm.size();
    req.accept = {spec("minmax:bits=4")};
    const gcc::plan_result planned = gcc::plan(req, p).value();
    const gcc::plan_row& row = planned.choice();
    const double t = row.predicted.total_s;
    gcc::drift_tracker d;
    for (int call = 0; call < 3; ++call) {
      d.observe(0, row, t * (2.0 + 0.1 * comm.rank()));
      d.observe(1, row, t * 1.1);
      if (comm.rank() == 0) d.observe(2, row, t * 5);
    }
    auto r = d.agree(comm, p);
    if (!r.ok()) return r.error();
    const auto me = static_cast<std::size_t>(comm.rank());
    again[me] = r.value();
    kept[me] = d.ratio(1);
    profiles[me] = gcc::profile_to_json(p);
    // What was scaled: the chosen row's entry, by 2.1.
    gcc::cost_profile want = start;
    if (status s = gcc::scale_for_drift(want, row.config, 2.0 + 0.1); !s.ok()) return s;
    if (gcc::profile_to_json(want) != profiles[me])
      return {status_code::internal_error, "the profile was not scaled by the median"};
    return d.replans() == 1 ? status{} : status{status_code::internal_error, "replans != 1"};
  });
  for (const status& s : st) EXPECT_TRUE(s.ok()) << s.message();
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(again[r], std::vector<std::uint64_t>{0}) << r;
    EXPECT_EQ(profiles[r], profiles[0]) << r;
    EXPECT_TRUE(kept[r].has_value()) << r;  // bucket 1 stays within the limit
  }
}

}  // namespace
