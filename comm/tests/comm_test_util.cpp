// SPDX-License-Identifier: Apache-2.0
#include "comm_test_util.hpp"

#include <algorithm>
#include <cstring>
#include <memory>
#include <mutex>

#include "gradcodec/blocks/float16.hpp"

namespace comm_test {

namespace {

std::uint64_t mix(std::uint64_t x) {
  std::uint64_t z = x + 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

std::vector<std::byte> input_bytes(const std::vector<float>& g, gc::dtype type) {
  std::vector<std::byte> b(g.size() * gc::dtype_size(type));
  for (std::size_t i = 0; i < g.size(); ++i) {
    if (type == gc::dtype::f32) {
      std::memcpy(b.data() + 4 * i, &g[i], 4);
    } else {
      const std::uint16_t h =
          type == gc::dtype::f16 ? gc::blocks::f32_to_f16(g[i]) : gc::blocks::f32_to_bf16(g[i]);
      std::memcpy(b.data() + 2 * i, &h, 2);
    }
  }
  return b;
}

void add(std::vector<scenario>& v, scenario s) { v.push_back(std::move(s)); }

}  // namespace

const void* corrupting_communicator::outgoing(const void* send, std::uint64_t bytes) {
  if (rank() != bad_ || ++calls_ != nth_ || bytes == 0) return send;
  const auto* p = static_cast<const std::byte*>(send);
  garbled_.assign(p, p + bytes);
  for (std::uint64_t i = from_; i < bytes && i < to_; ++i) garbled_[i] ^= std::byte{0x5A};
  corrupted_ = true;
  return garbled_.data();
}

gc::status corrupting_communicator::iallgatherv(const void* send, std::uint64_t send_bytes,
                                                void* recv,
                                                std::span<const std::uint64_t> recv_bytes,
                                                gcc::request& req) {
  return inner_.iallgatherv(outgoing(send, send_bytes), send_bytes, recv, recv_bytes, req);
}

gc::status corrupting_communicator::ialltoallv(const void* send,
                                               std::span<const std::uint64_t> send_bytes,
                                               void* recv,
                                               std::span<const std::uint64_t> recv_bytes,
                                               gcc::request& req) {
  std::uint64_t total = 0;
  for (auto b : send_bytes) total += b;
  return inner_.ialltoallv(outgoing(send, total), send_bytes, recv, recv_bytes, req);
}

bool all_ok(const std::vector<gc::status>& v) {
  return std::all_of(v.begin(), v.end(), [](const gc::status& s) { return s.ok(); });
}

std::string messages(const std::vector<gc::status>& v) {
  std::string m;
  for (const auto& s : v) m.append(s.message()).append(" | ");
  return m;
}

gcc::allreduce_config config(const char* spec, gcc::strategy how) {
  gcc::allreduce_config cfg;
  cfg.spec = gc::parse_spec(spec).value();
  cfg.how = how;
  cfg.where = gc::backend::reference;
  return cfg;
}

std::vector<float> make_grad(std::uint64_t n, int rank, int step, float scale) {
  std::vector<float> g(n);
  for (std::uint64_t i = 0; i < n; ++i) {
    const std::uint64_t h = mix((static_cast<std::uint64_t>(rank) << 48) ^
                                (static_cast<std::uint64_t>(step) << 32) ^ i);
    if (h % 23 == 0) {
      g[i] = 0.0f;
      continue;
    }
    const float u = static_cast<float>(h >> 40) * 0x1p-24f * 2.0f - 1.0f;  // [-1, 1)
    const float mag = (i / 97) % 3 == 0 ? 4.0f : ((i / 97) % 3 == 1 ? 1.0f : 0.05f);
    g[i] = u * mag * scale;
  }
  return g;
}

std::vector<scenario> all_scenarios() {
  std::vector<scenario> v;
  // Every codec with every strategy it supports.
  struct codec_case {
    const char* spec;
  };
  const codec_case codecs[] = {
      {"topk:ratio=0.05"},
      {"dgc:ratio=0.05,sample=0.5"},
      {"randomk:ratio=0.1"},
      {"randomk:ratio=0.1,unbiased=1"},
      {"threshold:tau=1.5"},
      {"qsgd:levels=7,bucket=64"},
      {"terngrad:bucket=64"},
      {"minmax:bits=3,bucket=64,rounding=stochastic"},
      {"onebit:bucket=64"},
      {"sign:bucket=64"},
      {"sign:bucket=64,scale=mean"},
      {"fp16"},
      {"bf16"},
      {"powersgd:rank=2"},
  };
  for (const auto& c : codecs) {
    auto spec = gc::parse_spec(c.spec).value();
    const auto have = gcc::supported_strategies(spec.id);
    for (auto how : {gcc::strategy::allgather, gcc::strategy::two_phase, gcc::strategy::dense,
                     gcc::strategy::majority_vote}) {
      if (!have.contains(how)) continue;
      scenario s;
      s.spec = c.spec;
      s.how = how;
      s.name = std::string(c.spec) + "/" + std::string(gcc::strategy_name(how));
      if (spec.id == gc::codec_id::powersgd) s.rows = 20;  // 20 x 50
      add(v, s);
    }
  }
  // PowerSGD over a bucket: two matrices (one too small to factorise) and a vector.
  for (auto how : {gcc::strategy::dense, gcc::strategy::allgather}) {
    scenario s;
    s.spec = "powersgd:rank=2";
    s.how = how;
    s.name = std::string("powersgd bucket/") + std::string(gcc::strategy_name(how));
    s.shapes = {{16, 16 * 24}, {3, 3 * 3}, {0, 37}, {30, 30 * 10}};
    add(v, s);
  }
  // Segments, with and without the pipeline (identical bytes either way).
  for (const char* spec : {"qsgd:levels=7,bucket=64", "topk:ratio=0.05", "threshold:tau=1.5",
                           "fp16", "randomk:ratio=0.1", "sign:bucket=64"}) {
    for (bool pipe : {false, true}) {
      scenario s;
      s.spec = spec;
      s.segment = 300;
      s.pipeline = pipe;
      s.n = 1337;
      s.name = std::string(spec) + (pipe ? " segments+pipeline" : " segments");
      add(v, s);
    }
  }
  {
    scenario s;
    s.spec = "topk:ratio=0.05";
    s.how = gcc::strategy::allgather;
    s.segment = 256;
    s.pipeline = true;
    s.name = "topk allgather segments+pipeline";
    add(v, s);
    s.spec = "sign:bucket=64";
    s.how = gcc::strategy::majority_vote;
    s.name = "sign vote segments+pipeline";
    add(v, s);
  }
  // Edge cases: n < W, tiny n, n = 0, empty threshold payloads, f16/bf16 input, no error
  // feedback, sums.
  for (const char* spec :
       {"topk:ratio=0.5", "qsgd:levels=3,bucket=64", "fp16", "randomk:k=1", "threshold:tau=0.1"}) {
    for (std::uint64_t n : {std::uint64_t{2}, std::uint64_t{5}}) {
      scenario s;
      s.spec = spec;
      s.n = n;
      s.name = std::string(spec) + " n=" + std::to_string(n);
      add(v, s);
    }
  }
  {
    scenario s;
    s.spec = "sign:bucket=64";
    s.how = gcc::strategy::majority_vote;
    s.n = 3;
    s.name = "sign vote n=3";
    add(v, s);
    s = scenario{};
    s.spec = "qsgd:levels=7,bucket=64";
    s.n = 0;
    s.name = "qsgd n=0";
    add(v, s);
  }
  for (auto how : {gcc::strategy::allgather, gcc::strategy::two_phase}) {
    scenario s;
    s.spec = "threshold:tau=100";  // nothing above tau: every payload is empty
    s.how = how;
    s.name = std::string("threshold empty payloads/") + std::string(gcc::strategy_name(how));
    add(v, s);
  }
  for (const char* spec :
       {"topk:ratio=0.05", "fp16", "qsgd:levels=7,bucket=64", "randomk:ratio=0.1"}) {
    scenario s;
    s.spec = spec;
    s.type = gc::dtype::f16;
    s.name = std::string(spec) + " f16 input";
    add(v, s);
  }
  {
    scenario s;
    s.spec = "bf16";
    s.type = gc::dtype::bf16;
    s.name = "bf16 bf16 input";
    add(v, s);
    s = scenario{};
    s.spec = "topk:ratio=0.05";
    s.error_feedback = false;
    s.name = "topk no error feedback";
    add(v, s);
    s = scenario{};
    s.spec = "minmax:bits=4,bucket=64";
    s.average = false;
    s.name = "minmax sum";
    add(v, s);
  }
  // Hierarchical: nodes of two consecutive ranks.
  for (const char* spec :
       {"qsgd:levels=7,bucket=64", "fp16", "topk:ratio=0.05", "powersgd:rank=2"}) {
    scenario s;
    s.spec = spec;
    s.ranks_per_node = 2;
    s.name = std::string(spec) + " hierarchical";
    if (gc::parse_spec(spec).value().id == gc::codec_id::powersgd) s.rows = 20;
    add(v, s);
  }
  return v;
}

namespace {

//! A copy of host bytes in the communicator's memory (the GPU's for NCCL).
gcc::memory_ops::block place(gcc::memory_ops& mem, const std::vector<std::byte>& host,
                             gc::status& st) {
  auto b = mem.allocate(host.size() + 1);
  if (!b) {
    st = {gc::status_code::device_error, "test: allocation failed"};
    return b;
  }
  if (auto s = mem.upload(b.get(), host.data(), host.size()); !s.ok()) st = s;
  return b;
}

gc::status fetch(gcc::memory_ops& mem, const gcc::memory_ops::block& b,
                 std::vector<std::byte>& host) {
  return mem.download(host.data(), b.get(), host.size());
}

}  // namespace

rank_result run_scenario(gcc::communicator& comm, const scenario& sc) {
  rank_result res;
  gcc::allreduce_config cfg;
  auto spec = gc::parse_spec(sc.spec);
  if (!spec) {
    res.st = spec.error();
    return res;
  }
  gcc::memory_ops* mem = comm.memory_services();
  if (mem == nullptr) {
    res.st = {gc::status_code::backend_unavailable, "test: no buffer services"};
    return res;
  }
  cfg.spec = spec.value();
  cfg.how = sc.how;
  cfg.error_feedback = sc.error_feedback;
  cfg.average = sc.average;
  cfg.pipeline = sc.pipeline;
  cfg.segment_elements = sc.segment;
  cfg.where = gc::backend::reference;
  gcc::allreduce_state state;
  gcc::workspace ws;
  gcc::hierarchy h;
  if (sc.ranks_per_node > 0) {
    if (auto st = gcc::make_hierarchy(comm, comm.rank() / sc.ranks_per_node, h); !st.ok()) {
      res.st = st;
      return res;
    }
  }
  for (int step = 0; step < sc.steps; ++step) {
    const gc::context ctx{1234, static_cast<std::uint64_t>(step), 7};
    gc::status st;
    if (!sc.shapes.empty()) {
      std::vector<std::vector<std::byte>> tensors;
      std::vector<gcc::memory_ops::block> placed;
      std::vector<gc::tensor_view> views;
      for (std::size_t t = 0; t < sc.shapes.size(); ++t) {
        tensors.push_back(input_bytes(
            make_grad(sc.shapes[t].second, comm.rank() + 16 * static_cast<int>(t), step, sc.scale),
            gc::dtype::f32));
        placed.push_back(place(*mem, tensors.back(), st));
        views.push_back(gc::tensor_view{placed.back().get(), sc.shapes[t].second, gc::dtype::f32,
                                        sc.shapes[t].first});
      }
      if (st.ok()) st = gcc::allreduce_tensors(comm, cfg, ctx, views, state, ws);
      std::vector<std::byte> out;
      for (std::size_t t = 0; t < tensors.size(); ++t) {
        if (st.ok()) st = fetch(*mem, placed[t], tensors[t]);
        out.insert(out.end(), tensors[t].begin(), tensors[t].end());
      }
      res.outputs.push_back(std::move(out));
    } else {
      auto bytes = input_bytes(make_grad(sc.n, comm.rank(), step, sc.scale), sc.type);
      auto placed = place(*mem, bytes, st);
      const gc::tensor_view io{placed.get(), sc.n, sc.type, sc.rows};
      if (st.ok())
        st = sc.ranks_per_node > 0 ? gcc::allreduce(h, cfg, ctx, io, io, state, ws)
                                   : gcc::allreduce(comm, cfg, ctx, io, io, state, ws);
      if (st.ok()) st = fetch(*mem, placed, bytes);
      res.outputs.push_back(std::move(bytes));
    }
    if (!st.ok()) {
      res.st = st;
      return res;
    }
  }
  res.state.resize(gcc::state_bytes(state));
  auto saved = gcc::save_state(state, res.state);
  if (!saved) res.st = saved.error();
  return res;
}

std::vector<rank_result> simulate(const scenario& sc, int world) {
  std::vector<rank_result> results(static_cast<std::size_t>(world));
  auto statuses = gcc::run_threads(world, [&](gcc::communicator& c) {
    results[static_cast<std::size_t>(c.rank())] = run_scenario(c, sc);
    return results[static_cast<std::size_t>(c.rank())].st;
  });
  return results;
}

std::uint64_t digest(const rank_result& r, bool with_state) {
  std::uint64_t h = 0xcbf29ce484222325ull;
  auto eat = [&](const std::vector<std::byte>& b) {
    for (std::byte x : b) {
      h ^= static_cast<std::uint8_t>(x);
      h *= 0x100000001b3ull;
    }
  };
  for (const auto& o : r.outputs) eat(o);
  if (with_state) eat(r.state);
  return h;
}

}  // namespace comm_test
