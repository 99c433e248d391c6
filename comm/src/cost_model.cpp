// SPDX-License-Identifier: Apache-2.0
//! @file
//! The cost model's formulas, strategy by strategy, as docs/planner.md writes them.
#include "gradcodec/comm/cost_model.hpp"

#include <algorithm>
#include <cmath>
#include <string>

#include "comm/src/agreement.hpp"
#include "comm/src/chunks.hpp"
#include "comm/src/wire_blocks.hpp"
#include "gradcodec/codec.hpp"
#include "gradcodec/powersgd.hpp"

namespace gradcodec::comm {

using detail::block_header;
using detail::chunk_of;
using detail::padded;
using detail::unit_of;

link_profile link_profile::uniform(double step_latency_s, double bytes_per_s, double overlap,
                                   double burst_bytes) noexcept {
  link_profile l;
  l.allgather = l.alltoall = l.allreduce = collective_cost{step_latency_s, bytes_per_s};
  l.overlap = overlap;
  l.burst_bytes = burst_bytes;
  return l;
}

const in_call_factor* codec_costs::factor(strategy how, bool pipeline) const noexcept {
  for (const in_call_factor& f : in_call)
    if (f.how == how && f.pipeline == pipeline) return &f;
  return nullptr;
}

const codec_costs* compute_profile::find(const codec_spec& spec) const noexcept {
  for (const codec_costs& c : codecs)
    if (c.spec == spec) return &c;
  return nullptr;
}

namespace {

using detail::call_check_bytes;  // the configuration check a call starts with

double rounds(const collective_cost& c, double steps, double sent) noexcept {
  return steps * c.step_latency_s + sent / c.bytes_per_s;
}

enum class kind : std::uint8_t { allgather, alltoall, allreduce };

//! One step of a segment: computation, then (unless none) a collective in which this rank
//! sends `sent` bytes.
struct event {
  double compute_s = 0;
  bool has_collective = false;
  kind k = kind::allgather;
  std::uint64_t sent = 0;
};

//! The steps of one segment, in the order a strategy runs them.
struct program {
  std::vector<event> events;
  void work(double s) { events.push_back({s, false, kind::allgather, 0}); }
  void send(kind k, std::uint64_t sent) { events.push_back({0, true, k, sent}); }
};

//! Replays programs on a link: computation refills the link's burst allowance, each
//! collective spends it first.
struct timeline {
  const link_profile& l;
  int w;
  double compute = 0, transfer = 0, idle = 1e30;  // the call follows the step's compute
  std::uint64_t wire = 0, collectives = 0;

  void run(const program& p) {
    for (const event& e : p.events) {
      compute += e.compute_s;
      idle += e.compute_s;
      if (!e.has_collective) continue;
      ++collectives;
      wire += e.sent;
      if (w <= 1) continue;
      const collective_cost& c = e.k == kind::allgather  ? l.allgather
                                 : e.k == kind::alltoall ? l.alltoall
                                                         : l.allreduce;
      const double steps = e.k == kind::allreduce ? 2.0 * (w - 1) : w - 1;
      const double free = std::min(l.burst_bytes, idle * c.bytes_per_s);
      transfer += rounds(c, steps, std::max(0.0, static_cast<double>(e.sent) - free));
      idle = 0;
    }
  }
};

//! The W chunks of m elements in whole units, as the strategies cut them.
template <class F>
void for_each_chunk(std::uint64_t m, std::uint64_t unit, int w, F&& f) {
  for (int c = 0; c < w; ++c) f(chunk_of(m, unit, w, c).len);
}

//! What the rank that sends the most sends in a reduce-scatter of W chunks (block_of(len)
//! bytes each, its own kept) and in the allgather of the owners' blocks (gather_of(len)),
//! and the length of its own chunk.
struct exchange {
  std::uint64_t scatter = 0, gather = 0, own = 0;
};

template <class F, class G>
exchange scatter_gather(int w, std::uint64_t m, std::uint64_t unit, F&& block_of, G&& gather_of) {
  std::uint64_t total = 0;
  for_each_chunk(m, unit, w, [&](std::uint64_t len) { total += block_of(len); });
  exchange x;
  bool first = true;
  const auto peers = static_cast<std::uint64_t>(w - 1);
  for_each_chunk(m, unit, w, [&](std::uint64_t len) {
    const std::uint64_t a = total - block_of(len), g = peers * gather_of(len);
    if (first || a + g > x.scatter + x.gather) x = {a, g, len};
    first = false;
  });
  return x;
}

//! One segment of m elements of a candidate.
struct segment_model {
  const candidate& c;
  const codec_costs* costs;  // null for the uncompressed mean
  const compute_profile& cp;
  int w;

  //! rows: PowerSGD's matrix rows (0: a vector); the other codecs ignore it.
  [[nodiscard]] std::uint64_t frame_bytes(std::uint64_t m, std::uint64_t rows) const {
    if (m == 0) return 0;
    if (costs != nullptr && costs->frame_bytes_per_element > 0)
      return static_cast<std::uint64_t>(
          std::ceil(costs->frame_bytes_per_element * static_cast<double>(m)));
    return encode_bound(c.spec, m, dtype::f32, c.spec.id == codec_id::powersgd ? rows : 0);
  }
  [[nodiscard]] std::uint64_t block(std::uint64_t m, std::uint64_t rows) const {
    return block_header + padded(frame_bytes(m, rows));
  }
  [[nodiscard]] std::uint64_t peers() const { return static_cast<std::uint64_t>(w - 1); }
  //! Threshold frames announce their sizes in a header exchange first.
  void announce(program& p) const {
    if (c.spec.id == codec_id::threshold) p.send(kind::allgather, peers() * block_header);
  }
  [[nodiscard]] double worker_encode(std::uint64_t m) const {
    if (m == 0) return 0;
    return (c.error_feedback ? costs->encode_with_feedback : costs->encode).at(m);
  }
  //! The owner's re-encode: two_phase keeps a server residual with error feedback, the
  //! casts never do.
  [[nodiscard]] double server_encode(std::uint64_t m) const {
    if (m == 0) return 0;
    const bool residual = c.error_feedback && c.how == strategy::two_phase;
    return (residual ? costs->encode_with_feedback : costs->encode).at(m);
  }
  [[nodiscard]] static double at(const op_cost& o, std::uint64_t m) { return m == 0 ? 0 : o.at(m); }

  //! The transport's ring allreduce of `bytes`.
  void ring(program& p, std::uint64_t bytes) const {
    p.send(kind::allreduce, 2 * peers() * bytes / static_cast<std::uint64_t>(w));
  }

  //! A dense reduction of `count` f32 values: reduce-scatter with headers, the owner's
  //! rank-ordered sum, allgather (or the transport's ring).
  void dense_reduction(program& p, std::uint64_t count) const {
    if (c.transport_allreduce) {
      ring(p, 4 * count);
      return;
    }
    const auto values = [](std::uint64_t len) { return block_header + 4 * len; };
    const exchange x = scatter_gather(w, count, 1, values, values);
    p.send(kind::alltoall, x.scatter);
    p.work(static_cast<double>(w) * at(cp.copy, x.own));
    p.send(kind::allgather, x.gather);
  }

  [[nodiscard]] program run(std::uint64_t m, std::uint64_t rows = 0) const {
    program p;
    const double W = w;
    if (c.uncompressed) {
      dense_reduction(p, m);
      p.work(at(cp.copy, m));
      return p;
    }
    switch (c.how) {
      case strategy::allgather:
      case strategy::majority_vote:
        p.work(worker_encode(m));
        announce(p);
        p.send(kind::allgather, peers() * block(m, rows));
        p.work(W * at(costs->decode_accumulate, m) + at(cp.copy, m));
        break;
      case strategy::two_phase:
      case strategy::dense: {
        if (c.spec.id == codec_id::randomk) {  // only the k shared-index values are reduced
          p.work(worker_encode(m));
          dense_reduction(p, sparse_count(c.spec, m));
          p.work(at(costs->decode, m));
          break;
        }
        if (c.how == strategy::dense && c.transport_allreduce) {  // 16-bit values, one ring
          p.work(at(cp.copy, m) + worker_encode(m));
          ring(p, 2 * m);
          p.work(at(costs->decode, m));
          break;
        }
        const std::uint64_t unit = unit_of(c.spec);
        double encodes = 0, decodes = 0;
        for_each_chunk(m, unit, w, [&](std::uint64_t len) {
          encodes += worker_encode(len);
          decodes += at(costs->decode, len);
        });
        // The casts first divide the input by W into an f32 scratch.
        if (c.how == strategy::dense) encodes += at(cp.copy, m);
        const auto framed = [&](std::uint64_t len) { return block(len, 0); };
        const exchange x = scatter_gather(w, m, unit, framed, framed);
        p.work(encodes);
        announce(p);
        p.send(kind::alltoall, x.scatter);
        p.work(W * at(costs->decode_accumulate, x.own) + server_encode(x.own));
        announce(p);
        p.send(kind::allgather, x.gather);
        p.work(decodes);
        break;
      }
      case strategy::automatic: break;
    }
    return p;
  }

  //! PowerSGD's dense strategy (comm/src/strategies/powersgd_dense.cpp) on its pieces:
  //! P = MQ of every factorised piece (the first half of the codec's encode), one
  //! reduction of every P with the other pieces' values, Q = MᵀP (the second half), one
  //! reduction of every Q, then the orthogonalisation and the product (its decode).
  [[nodiscard]] program powersgd_dense(std::span<const tensor_slot> pieces) const {
    program p;
    double half = 0, finish = 0;
    std::uint64_t p_total = 0, q_total = 0;
    for (const tensor_slot& t : pieces) {
      const detail::powersgd_factors f = detail::powersgd_factors_of(c.spec, t.rows, t.n);
      if (!f.compressed) {
        half += at(cp.copy, t.n) / 2;  // into the reduction's values, and back
        finish += at(cp.copy, t.n);
        p_total += t.n;
        continue;
      }
      half += worker_encode(t.n) / 2;
      finish += at(costs->decode, t.n);
      p_total += f.rows * f.rank;
      q_total += f.cols * f.rank;
    }
    p.work(half);
    dense_reduction(p, p_total);
    p.work(half);
    dense_reduction(p, q_total);
    p.work(finish);
    return p;
  }
};

//! Replays the call's segments of n elements on t and returns what pipelining hides: it
//! overlaps the encode of a segment with the transfer of the one before, so the first
//! segment's compute and the last one's transfer stay exposed.
double run_segments(const segment_model& model, timeline& t, std::uint64_t n, double overlap) {
  const candidate& c = model.c;
  const std::uint64_t unit = c.uncompressed ? 1 : unit_of(c.spec);
  const std::uint64_t seg =
      c.segment_elements == 0 ? n : std::min(n, (c.segment_elements + unit - 1) / unit * unit);
  const std::uint64_t full = n / seg, rest = n % seg;
  const program one = model.run(seg);
  double first_compute = 0, last_transfer = 0;
  for (std::uint64_t i = 0; i < full; ++i) {
    const double before = t.compute, sent_before = t.transfer;
    t.run(one);
    if (i == 0) first_compute = t.compute - before;
    last_transfer = t.transfer - sent_before;
  }
  if (rest != 0) {
    const double sent_before = t.transfer;
    t.run(model.run(rest));
    last_transfer = t.transfer - sent_before;
  }
  if (!c.pipeline || full + (rest != 0 ? 1 : 0) <= 1) return 0;
  const double exposed_compute = t.compute - first_compute;
  const double exposed_transfer = t.transfer - last_transfer;
  return overlap * std::max(0.0, std::min(exposed_compute, exposed_transfer));
}

}  // namespace

double allgather_seconds(const link_profile& l, int ranks, std::uint64_t block_bytes) noexcept {
  if (ranks <= 1) return 0;
  const double peers = ranks - 1;
  return rounds(l.allgather, peers, peers * static_cast<double>(block_bytes));
}

double alltoall_seconds(const link_profile& l, int ranks, std::uint64_t block_bytes) noexcept {
  if (ranks <= 1) return 0;
  const double peers = ranks - 1;
  return rounds(l.alltoall, peers, peers * static_cast<double>(block_bytes));
}

double ring_allreduce_seconds(const link_profile& l, int ranks, std::uint64_t bytes) noexcept {
  if (ranks <= 1) return 0;
  const double peers = ranks - 1;
  return rounds(l.allreduce, 2 * peers, 2 * peers / ranks * static_cast<double>(bytes));
}

result<prediction> predict(const candidate& c, std::uint64_t n, int ranks, const cost_profile& p,
                           std::span<const tensor_slot> tensors) {
  auto out = predict_uncorrected(c, n, ranks, p, tensors);
  if (!out.ok() || c.uncompressed) return out;
  // A configuration that cannot pipeline (one segment, PowerSGD) runs as the sequential one.
  const bool pipelined = c.pipeline && c.spec.id != codec_id::powersgd && c.segment_elements != 0 &&
                         c.segment_elements < n;
  const in_call_factor* f = p.compute.find(c.spec)->factor(c.how, pipelined);
  if (f == nullptr) return out;
  prediction& r = out.value();
  const double check = ring_allreduce_seconds(p.link, ranks, call_check_bytes);
  r.compute_s *= f->compute;
  r.transfer_s = std::max(check, r.transfer_s + f->wait * r.compute_s);
  r.hidden_s = std::min(r.hidden_s * f->compute, std::min(r.compute_s, r.transfer_s));
  r.total_s = r.compute_s + r.transfer_s - r.hidden_s;
  return out;
}

result<prediction> predict_hierarchical(const candidate& c, std::uint64_t n, node_layout layout,
                                        const cost_profile& p,
                                        std::span<const tensor_slot> tensors) {
  if (!p.intra)
    return status{status_code::invalid_argument,
                  "cost model: a hierarchical call needs the profile's intra-node link"};
  if (layout.nodes < 1 || layout.per_node < 1)
    return status{status_code::invalid_argument,
                  "cost model: a layout needs at least one node of at least one rank"};
  // The leaders' call among themselves, its configuration check replaced by the world's.
  auto leaders = predict(c, n, layout.nodes, p, tensors);
  if (!leaders.ok()) return leaders;
  prediction out = leaders.value();
  out.transfer_s +=
      ring_allreduce_seconds(p.link, layout.nodes * layout.per_node, call_check_bytes) -
      ring_allreduce_seconds(p.link, layout.nodes, call_check_bytes);
  {  // the node level runs whatever its size and n (its blocks carry headers)
    const link_profile& l = *p.intra;
    const int w = layout.per_node;
    const double peers = w - 1;
    // Reduce-scatter of the input (f32) within the node, the owners' sums, then every
    // owner's chunk to the leader, which receives w − 1 of them.
    std::uint64_t to_others = 0;
    for (int d = 1; d < w; ++d) to_others += block_header + 4 * chunk_of(n, 1, w, d).len;
    const std::uint64_t own = chunk_of(n, 1, w, 0).len;
    out.transfer_s += 2 * rounds(l.alltoall, peers, static_cast<double>(to_others));
    out.compute_s += own == 0 ? 0 : static_cast<double>(w) * p.compute.copy.at(own);
    // The outcome word, then the result, broadcast from the leader (scatter, then ring
    // allgather: 2(w − 1)/w of the bytes from the root), and the store in the output.
    for (const std::uint64_t bytes : {std::uint64_t{8}, 4 * n}) {
      const std::uint64_t sent = 2 * static_cast<std::uint64_t>(w - 1) * bytes / w;
      out.transfer_s += rounds(l.allgather, 2 * peers, static_cast<double>(sent));
      out.wire_bytes += sent;
    }
    out.wire_bytes += to_others;
    out.collectives += 4;
    out.compute_s += n == 0 ? 0 : p.compute.copy.at(n);
  }
  out.total_s = out.compute_s + out.transfer_s - out.hidden_s;
  return out;
}

result<prediction> predict_uncorrected(const candidate& c, std::uint64_t n, int ranks,
                                       const cost_profile& p,
                                       std::span<const tensor_slot> tensors) {
  if (ranks < 1) return status{status_code::invalid_argument, "cost model: ranks must be >= 1"};
  if (status st = check_slots(tensors, n); !st.ok()) return st;
  const codec_costs* costs = nullptr;
  if (!c.uncompressed) {
    if (c.how == strategy::automatic)
      return status{status_code::invalid_argument, "cost model: the strategy must be resolved"};
    auto how = resolve_strategy(c.spec.id, c.how);
    if (!how.ok()) return how.error();
    costs = p.compute.find(c.spec);
    if (costs == nullptr)
      return status{status_code::invalid_argument,
                    "cost model: the profile has no costs for " + to_string(c.spec)};
  }
  prediction out;
  // The configuration check: one small allreduce.
  out.transfer_s = ring_allreduce_seconds(p.link, ranks, call_check_bytes);
  out.collectives = 1;
  if (n == 0) {
    out.total_s = out.transfer_s;
    return out;
  }
  const segment_model model{c, costs, p.compute, ranks};
  timeline t{p.link, ranks};
  if (!c.uncompressed && c.spec.id == codec_id::powersgd) {
    // Its segments are its pieces, never pipelined; the dense strategy runs them together.
    std::vector<tensor_slot> pieces;
    detail::powersgd_pieces(n, powersgd_square_rows(n), tensors, pieces);
    if (c.how == strategy::dense) {
      t.run(model.powersgd_dense(pieces));
    } else {
      for (const tensor_slot& piece : pieces) t.run(model.run(piece.n, piece.rows));
    }
  } else {
    out.hidden_s = run_segments(model, t, n, p.link.overlap);
  }
  out.compute_s = t.compute;
  out.transfer_s += t.transfer;
  out.wire_bytes = t.wire;
  out.collectives += t.collectives;
  out.total_s = out.compute_s + out.transfer_s - out.hidden_s;
  return out;
}

}  // namespace gradcodec::comm
