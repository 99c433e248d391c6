// SPDX-License-Identifier: Apache-2.0
//! @file
//! The measurements behind a cost profile: codec operations timed at two sizes, the
//! collectives at two block sizes, the overlap of a transfer with a copy loop, and the
//! agreement that makes every rank's profile the slowest rank's.
#include "gradcodec/comm/calibrate.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "comm/src/contexts.hpp"
#include "gradcodec/bounds.hpp"
#include "gradcodec/codec.hpp"
#include "gradcodec/comm/allreduce.hpp"
#include "gradcodec/comm/plan.hpp"
#include "gradcodec/powersgd.hpp"

namespace gradcodec::comm {

using detail::splitmix64;

namespace {

using clock_type = std::chrono::steady_clock;

double elapsed(clock_type::time_point t0) {
  return std::chrono::duration<double>(clock_type::now() - t0).count();
}

//! The median time of body(), run at least 3 times and for at least min_s in all.
result<double> time_median(double min_s, const std::function<status()>& body) {
  std::vector<double> runs;
  const auto start = clock_type::now();
  while (runs.size() < 3 || (elapsed(start) < min_s && runs.size() < 1000)) {
    const auto t0 = clock_type::now();
    if (status s = body(); !s.ok()) return s;
    runs.push_back(elapsed(t0));
  }
  std::sort(runs.begin(), runs.end());
  return runs[runs.size() / 2];
}

//! t = fixed + m × per through two points; a negative intercept (noise) is clamped to 0.
op_cost fit(std::uint64_t m0, double t0, std::uint64_t m1, double t1) {
  op_cost c;
  c.per_element_s = std::max(0.0, (t1 - t0) / static_cast<double>(m1 - m0));
  c.fixed_s = t0 - c.per_element_s * static_cast<double>(m0);
  if (c.fixed_s < 0) {
    c.fixed_s = 0;
    c.per_element_s = t1 / static_cast<double>(m1);
  }
  return c;
}

collective_cost fit_link(double steps, double sent0, double t0, double sent1, double t1) {
  collective_cost c;
  const double slope = (t1 - t0) / (sent1 - sent0);
  if (slope <= 0) {  // noise swamped the size difference: all rate, no latency
    c.bytes_per_s = sent1 / std::max(t1, 1e-9);
    c.step_latency_s = 0;
    return c;
  }
  c.bytes_per_s = 1 / slope;
  c.step_latency_s = std::max(0.0, (t0 - sent0 * slope) / steps);
  return c;
}

//! Gradient-like data: a sum of four uniforms from a counter hash, one element in 64 ten
//! times larger.
void fill(std::span<float> x) {
  for (std::size_t i = 0; i < x.size(); ++i) {
    std::uint64_t h = splitmix64(i);
    float s = 0;
    for (int j = 0; j < 4; ++j, h = splitmix64(h))
      s += static_cast<float>(h >> 40) * (1.0f / 16777216.0f);
    x[i] = (s - 2.0f) * (i % 64 == 17 ? 10.0f : 1.0f) * 1e-3f;
  }
}

struct scratch {
  std::vector<std::byte> bytes;
  mutable_bytes get(result<std::size_t> size) {
    if (!size.ok()) return {};
    if (bytes.size() < size.value()) bytes.resize(size.value());
    return {bytes.data(), size.value()};
  }
};

struct op_times {
  double encode = 0, encode_with_feedback = 0, decode = 0, decode_accumulate = 0;
  double frame_bytes = 0;  // mean over the feedback encodes
};

result<op_times> time_ops(const codec_spec& spec, std::uint64_t m, const calibrate_options& opt) {
  std::vector<float> in(m), residual(m, 0.0f), out(m), acc(m, 0.0f);
  fill(in);
  const std::uint64_t rows = spec.id == codec_id::powersgd ? powersgd_square_rows(m) : 0;
  const const_tensor_view iv{in.data(), m, dtype::f32, rows};
  const tensor_view rv{residual.data(), m, dtype::f32, rows};
  const tensor_view ov{out.data(), m, dtype::f32, rows};
  const tensor_view av{acc.data(), m, dtype::f32, rows};
  std::vector<std::byte> frame(encode_bound(spec, m, dtype::f32, rows));
  scratch ws;
  exec_options eo;
  eo.threads = opt.threads;
  const context ctx{0x6361'6c69'6272'6174ULL, 0, 0};
  std::size_t frame_len = 0;
  op_times t;

  auto encode_once = [&]() -> status {
    exec_options o = eo;
    o.workspace = ws.get(workspace_size(spec, iv, operation::encode, eo));
    auto r = encode(spec, ctx, iv, frame, o);
    if (!r.ok()) return r.error();
    frame_len = r.value();
    return {};
  };
  auto e = time_median(opt.seconds_per_point, encode_once);
  if (!e.ok()) return e.error();
  t.encode = e.value();

  double total_bytes = 0, calls = 0;
  context fctx = ctx;
  auto feedback_once = [&]() -> status {
    exec_options o = eo;
    o.workspace = ws.get(workspace_size(spec, iv, operation::encode_with_feedback, eo));
    ++fctx.step;
    auto r = encode_with_feedback(spec, fctx, iv, rv, frame, o);
    if (!r.ok()) return r.error();
    frame_len = r.value();
    total_bytes += static_cast<double>(r.value());
    ++calls;
    return {};
  };
  auto f = time_median(opt.seconds_per_point, feedback_once);
  if (!f.ok()) return f.error();
  t.encode_with_feedback = f.value();
  t.frame_bytes = total_bytes / calls;

  const const_bytes fb{frame.data(), frame_len};
  auto decode_once = [&]() -> status {
    exec_options o = eo;
    o.workspace = ws.get(workspace_size(spec, ov, operation::decode, eo));
    return decode(fb, ov, o);
  };
  auto d = time_median(opt.seconds_per_point, decode_once);
  if (!d.ok()) return d.error();
  t.decode = d.value();

  auto accumulate_once = [&]() -> status {
    exec_options o = eo;
    o.workspace = ws.get(workspace_size(spec, av, operation::decode_accumulate, eo));
    return decode_accumulate(fb, av, 0.5f, o);
  };
  auto a = time_median(opt.seconds_per_point, accumulate_once);
  if (!a.ok()) return a.error();
  t.decode_accumulate = a.value();
  return t;
}

//! One pass reading src and writing dst (the unit of the copy cost and of the overlap
//! probe's work).
void copy_pass(const std::vector<float>& src, std::vector<float>& dst) {
  std::memcpy(dst.data(), src.data(), src.size() * sizeof(float));
}

result<double> time_collective(communicator& comm, int kind, std::uint64_t block,
                               const calibrate_options& opt, std::vector<std::byte>& send,
                               std::vector<std::byte>& recv) {
  const auto w = static_cast<std::uint64_t>(comm.size());
  send.assign(block * w, std::byte{1});
  recv.assign(block * w, std::byte{0});
  const std::vector<std::uint64_t> sizes(w, block);
  std::vector<double> runs;
  for (int i = 0; i <= opt.link_repeats; ++i) {  // the first call is a warm-up
    if (status s = comm.barrier(); !s.ok()) return s;
    const auto t0 = clock_type::now();
    status s;
    switch (kind) {
      case 0: s = comm.allgather(send.data(), block, recv.data()); break;
      case 1: s = comm.alltoallv(send.data(), sizes, recv.data(), sizes); break;
      default:
        s = comm.allreduce(send.data(), recv.data(), block / 4, element_type::f32, reduce_op::sum);
    }
    if (!s.ok()) return s;
    if (i > 0) runs.push_back(elapsed(t0));
  }
  std::sort(runs.begin(), runs.end());
  return runs[runs.size() / 2];
}

//! FNV-1a of the specs' texts: equal on ranks that measured the same list.
std::uint64_t specs_digest(const compute_profile& p) {
  std::uint64_t h = 0xcbf29ce484222325ULL;
  for (const codec_costs& c : p.codecs)
    for (char ch : to_string(c.spec) + ";") {
      h ^= static_cast<unsigned char>(ch);
      h *= 0x100000001b3ULL;
    }
  return h;
}

//! Every number of a link, in a fixed order, as a reference.
template <class F>
void for_each_link_number(link_profile& l, F&& f) {
  for (collective_cost* c : {&l.allgather, &l.alltoall, &l.allreduce}) {
    f(c->step_latency_s);
    f(c->bytes_per_s);
  }
  f(l.overlap);
  f(l.burst_bytes);
}

//! Every number of a profile, in a fixed order, as a reference (for the agreement).
template <class F>
void for_each_number(cost_profile& p, F&& f) {
  for_each_link_number(p.link, f);
  if (p.intra) for_each_link_number(*p.intra, f);
  f(p.compute.copy.fixed_s);
  f(p.compute.copy.per_element_s);
  for (codec_costs& c : p.compute.codecs) {
    for (op_cost* o : {&c.encode, &c.encode_with_feedback, &c.decode, &c.decode_accumulate}) {
      f(o->fixed_s);
      f(o->per_element_s);
    }
    f(c.frame_bytes_per_element);
    for (in_call_factor& k : c.in_call) {
      f(k.compute);
      f(k.wait);
    }
  }
}

double ratio(double measured, double predicted) {
  if (!(predicted > 1e-9)) return 1;  // nothing to scale (no transfer on one rank)
  return std::clamp(measured / predicted, 0.125, 8.0);
}

//! The in-call factors of every codec and strategy, on this rank, against `p`.
status measure_in_call(communicator& comm, const calibrate_options& opt, cost_profile& p) {
  // One rank has no link, and its calls skip the exchange: nothing to learn for W > 1.
  if (opt.in_call_repeats <= 0 || opt.in_call_elements == 0 || comm.size() <= 1) return {};
  const std::uint64_t n = opt.in_call_elements;
  std::vector<float> grad(n), out(n);
  fill(grad);
  // Different data on every rank, as in training (the scale only, so every frame size is
  // the one of the shared data).
  const float scale = 1.0f + 0.125f * static_cast<float>(comm.rank());
  for (float& v : grad) v *= scale;
  for (codec_costs& c : p.compute.codecs) {
    c.in_call.clear();
    for (strategy how :
         {strategy::allgather, strategy::two_phase, strategy::dense, strategy::majority_vote})
      for (bool pipe : {false, true}) {
        if (!supported_strategies(c.spec.id).contains(how)) continue;
        if (pipe && (c.spec.id == codec_id::powersgd || opt.in_call_segment == 0 ||
                     opt.in_call_segment >= n))
          continue;  // nothing to pipeline: predict() uses the sequential factor
        const candidate cand{
            false, c.spec, how, pipe, opt.in_call_segment, bounds(c.spec, 0).feedback_safe};
        allreduce_config cfg = config_of(cand);
        cfg.threads = opt.threads;
        const std::uint64_t rows = c.spec.id == codec_id::powersgd ? powersgd_square_rows(n) : 0;
        allreduce_state state;
        workspace ws;
        phase_times timed;
        // Back to back after one barrier, as a training loop calls it: a barrier before
        // every call would hand each one a rested link (a full shaper bucket) that
        // training never gives it.
        if (status s = comm.barrier(); !s.ok()) return s;
        for (int i = 0; i <= opt.in_call_repeats; ++i) {
          phase_times t;
          status s =
              allreduce(comm, cfg, {0x6361'6c69'6272'6174ULL, static_cast<std::uint64_t>(i), 0},
                        const_tensor_view{grad.data(), n, dtype::f32, rows},
                        tensor_view{out.data(), n, dtype::f32, rows}, state, ws, &t);
          if (!s.ok()) return s;
          if (i > 0) timed += t;  // the first call is a warm-up
        }
        auto predicted = predict_uncorrected(cand, n, comm.size(), p);
        if (!predicted.ok()) return predicted.error();
        const double reps = opt.in_call_repeats;
        const double check = ring_allreduce_seconds(p.link, comm.size(), 64);
        in_call_factor f;
        f.how = how;
        f.pipeline = pipe;
        const double compute = (timed.encode_s + timed.reduce_s + timed.decode_s) / reps;
        f.compute = ratio(compute, predicted.value().compute_s);
        if (compute > 1e-9)
          f.wait = std::clamp(
              (timed.comm_s / reps - (predicted.value().transfer_s - check)) / compute, -8.0, 8.0);
        c.in_call.push_back(f);
      }
  }
  return {};
}

}  // namespace

result<compute_profile> measure_compute(const calibrate_options& opt) {
  if (opt.small_elements == 0 || opt.large_elements <= opt.small_elements)
    return status{status_code::invalid_argument,
                  "calibrate: need 0 < small_elements < large_elements"};
  compute_profile p;
  const std::uint64_t m0 = opt.small_elements, m1 = opt.large_elements;
  {
    std::vector<float> src(m1), dst(m1);
    fill(src);
    double t[2];
    for (int i = 0; i < 2; ++i) {
      const std::uint64_t m = i == 0 ? m0 : m1;
      std::vector<float> s(src.begin(), src.begin() + static_cast<std::ptrdiff_t>(m)), d(m);
      auto r = time_median(opt.seconds_per_point, [&]() -> status {
        copy_pass(s, d);
        return {};
      });
      t[i] = r.value();
    }
    p.copy = fit(m0, t[0], m1, t[1]);
  }
  std::vector<codec_spec> specs = opt.specs;
  if (std::find(specs.begin(), specs.end(), make_spec(codec_id::bf16)) == specs.end())
    specs.push_back(make_spec(codec_id::bf16));
  for (const codec_spec& spec : specs) {
    if (status v = validate(spec); !v.ok()) return v;
    auto a = time_ops(spec, m0, opt);
    if (!a.ok()) return a.error();
    auto b = time_ops(spec, m1, opt);
    if (!b.ok()) return b.error();
    codec_costs c;
    c.spec = spec;
    c.encode = fit(m0, a.value().encode, m1, b.value().encode);
    c.encode_with_feedback =
        fit(m0, a.value().encode_with_feedback, m1, b.value().encode_with_feedback);
    c.decode = fit(m0, a.value().decode, m1, b.value().decode);
    c.decode_accumulate = fit(m0, a.value().decode_accumulate, m1, b.value().decode_accumulate);
    if (spec.id == codec_id::threshold)
      c.frame_bytes_per_element = b.value().frame_bytes / static_cast<double>(m1);
    p.codecs.push_back(c);
  }
  return p;
}

result<link_profile> probe_link(communicator& comm, const calibrate_options& opt) {
  link_profile l;
  const int w = comm.size();
  if (w <= 1) return l;  // no link: every transfer is free
  if (opt.small_bytes == 0 || opt.large_bytes <= opt.small_bytes || opt.link_repeats < 1)
    return status{status_code::invalid_argument,
                  "calibrate: need 0 < small_bytes < large_bytes and link_repeats >= 1"};
  // Blocks rounded to whole f32 elements, so the allreduce probe sends the same bytes.
  const std::uint64_t b0 = (opt.small_bytes + 3) / 4 * 4, b1 = (opt.large_bytes + 3) / 4 * 4;
  const double peers = w - 1;
  std::vector<std::byte> send, recv;
  collective_cost* kinds[3] = {&l.allgather, &l.alltoall, &l.allreduce};
  double large_allgather_s = 0;
  for (int k = 0; k < 3; ++k) {
    auto t0 = time_collective(comm, k, b0, opt, send, recv);
    if (!t0.ok()) return t0.error();
    auto t1 = time_collective(comm, k, b1, opt, send, recv);
    if (!t1.ok()) return t1.error();
    if (k == 0) large_allgather_s = t1.value();
    // allreduce: the block is the whole buffer; the ring sends 2(W-1)/W of it in 2(W-1) rounds
    const double steps = k == 2 ? 2 * peers : peers;
    const double per = k == 2 ? 2 * peers / w : peers;
    *kinds[k] = fit_link(steps, per * static_cast<double>(b0), t0.value(),
                         per * static_cast<double>(b1), t1.value());
  }

  // Burst: the large allgather again after an idle gap long enough to refill any bucket
  // smaller than what it sends; what it gained over the back-to-back call, at the rate, is
  // the burst.
  {
    const double sent = peers * static_cast<double>(b1);
    const double gap = std::min(1.0, 2 * sent / l.allgather.bytes_per_s);
    send.assign(b1, std::byte{1});
    recv.assign(b1 * static_cast<std::uint64_t>(w), std::byte{0});
    std::vector<double> after_gap;
    for (int i = 0; i < opt.link_repeats; ++i) {
      std::this_thread::sleep_for(std::chrono::duration<double>(gap));
      if (status s = comm.barrier(); !s.ok()) return s;
      const auto t0 = clock_type::now();
      if (status s = comm.allgather(send.data(), b1, recv.data()); !s.ok()) return s;
      after_gap.push_back(elapsed(t0));
    }
    std::sort(after_gap.begin(), after_gap.end());
    const double gained = large_allgather_s - after_gap[after_gap.size() / 2];
    l.burst_bytes = std::clamp(gained * l.allgather.bytes_per_s, 0.0, sent);
  }

  // Overlap: a copy loop as long as the large allgather, alone and during one.
  const std::uint64_t m = std::uint64_t{1} << 16;
  std::vector<float> src(m), dst(m);
  fill(src);
  const auto c0 = clock_type::now();
  for (int i = 0; i < 8; ++i) copy_pass(src, dst);
  const double per_pass = elapsed(c0) / 8;
  const auto passes =
      static_cast<std::uint64_t>(std::ceil(large_allgather_s / std::max(per_pass, 1e-9)));
  if (status s = comm.barrier(); !s.ok()) return s;
  auto a0 = clock_type::now();
  for (std::uint64_t i = 0; i < passes; ++i) copy_pass(src, dst);
  const double alone = elapsed(a0);
  send.assign(b1, std::byte{1});
  recv.assign(b1 * static_cast<std::uint64_t>(w), std::byte{0});
  if (status s = comm.barrier(); !s.ok()) return s;
  const auto both0 = clock_type::now();
  request req;
  if (status s = comm.iallgather(send.data(), b1, recv.data(), req); !s.ok()) return s;
  for (std::uint64_t i = 0; i < passes; ++i) copy_pass(src, dst);
  if (status s = comm.wait(req); !s.ok()) return s;
  const double both = elapsed(both0);
  const double shorter = std::min(alone, large_allgather_s);
  l.overlap = shorter > 0 ? std::clamp((alone + large_allgather_s - both) / shorter, 0.0, 1.0) : 0;
  return l;
}

status agree_profile(communicator& comm, cost_profile& profile) {
  // The codec list and whether there is an intra-node link: what the numbers are of.
  const std::uint64_t digest = specs_digest(profile.compute) ^ (profile.intra ? 1u : 0u);
  std::uint64_t words[2] = {digest, ~digest};
  if (status s = comm.allreduce(words, words, 2, element_type::u64, reduce_op::max); !s.ok())
    return s;
  if (words[0] != digest || words[1] != ~digest)
    return status{status_code::comm_error,
                  "calibrate: the ranks measured different codec lists (every rank must pass the "
                  "same specs), or some have an intra-node link and others not"};
  // Every rank's numbers to every rank; each number becomes the median over the ranks (the
  // upper one of the middle two for an even count), which one descheduled rank cannot move
  // far and which every rank computes from the same bits.
  std::vector<double> mine;
  for_each_number(profile, [&](double& v) { mine.push_back(std::isfinite(v) ? v : 0); });
  const auto w = static_cast<std::size_t>(comm.size());
  std::vector<double> all(mine.size() * w);
  if (status s = comm.allgather(mine.data(), mine.size() * sizeof(double), all.data()); !s.ok())
    return s;
  std::size_t i = 0;
  std::vector<double> column(w);
  for_each_number(profile, [&](double& v) {
    for (std::size_t r = 0; r < w; ++r) column[r] = all[r * mine.size() + i];
    std::sort(column.begin(), column.end());
    v = column[w / 2];
    ++i;
  });
  profile.ranks = comm.size();
  return {};
}

namespace {

//! calibrate's steps on `comm`, the link measured by probe(p), which every rank calls at
//! the same point and which fills p.link (and p.intra for a hierarchy).
template <class Probe>
result<cost_profile> calibrate_with(communicator& comm, const calibrate_options& opt,
                                    Probe&& probe) {
  cost_profile p;
  // Every rank measures at the same time, as it will compute during training.
  if (status s = comm.barrier(); !s.ok()) return s;
  auto compute = measure_compute(opt);
  // A rank that failed still takes part in the collectives below; its failure travels in
  // the digest as a list no other rank has.
  if (compute.ok()) p.compute = std::move(compute.value());
  if (status s = probe(p); !s.ok()) return s;
  if (status s = agree_profile(comm, p); !s.ok()) return compute.ok() ? s : compute.error();
  if (!compute.ok()) return compute.error();
  if (status s = measure_in_call(comm, opt, p); !s.ok()) return s;
  if (status s = agree_profile(comm, p); !s.ok()) return s;
  return p;
}

}  // namespace

result<cost_profile> calibrate(communicator& comm, const calibrate_options& opt) {
  return calibrate_with(comm, opt, [&](cost_profile& p) -> status {
    auto link = probe_link(comm, opt);
    if (!link.ok()) return link.error();
    p.link = link.value();
    return {};
  });
}

result<cost_profile> calibrate(const hierarchy& h, const calibrate_options& opt) {
  if (h.world == nullptr || h.intra == nullptr || h.leader() != (h.inter != nullptr))
    return status{status_code::invalid_argument, "calibrate: inconsistent hierarchy"};
  bool probed = false;
  auto p = calibrate_with(*h.world, opt, [&](cost_profile& q) -> status {
    auto intra = probe_link(*h.intra, opt);
    if (!intra.ok()) return intra.error();
    q.intra = intra.value();
    // The leaders' link, as numbers each leader sends its node (the first says whether
    // the probe succeeded, so no member waits for a leader that failed).
    double numbers[9] = {};
    if (h.leader()) {
      if (auto inter = probe_link(*h.inter, opt); inter.ok()) {
        numbers[0] = 1;
        int k = 1;
        for_each_link_number(inter.value(), [&](double& x) { numbers[k++] = x; });
      }
    }
    if (status s = h.intra->broadcast(numbers, sizeof numbers, 0); !s.ok()) return s;
    probed = numbers[0] == 1;
    // A node whose leader failed takes part in the agreement without an intra-node link,
    // so the other nodes' agreement fails too instead of waiting for it.
    if (!probed) q.intra.reset();
    int k = 1;
    for_each_link_number(q.link, [&](double& x) { x = numbers[k++]; });
    return {};
  });
  if (p.ok() && !probed)
    return status{status_code::comm_error, "calibrate: the link probe among the leaders failed"};
  return p;
}

}  // namespace gradcodec::comm
