// SPDX-License-Identifier: Apache-2.0
//! @file
//! The outer synchronizer (outer.hpp): the schedule, the agreement of a sync, the
//! pseudo-gradient, participation, the reduction (inline or on the workspace's thread)
//! and the outer optimizer. docs/outer.md is the written form.
#include "gradcodec/comm/outer.hpp"

#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>
#include <optional>
#include <string>
#include <thread>
#include <utility>

#include "comm/src/agreement.hpp"
#include "comm/src/contexts.hpp"
#include "comm/src/slices.hpp"
#include "gradcodec/blocks/philox.hpp"

namespace gradcodec::comm {

struct outer_workspace::impl {
  workspace reduce;                   // the allreduce's scratch
  std::vector<float> delta;           // Δ of the fragment being sent, then its reduced mean
  std::vector<tensor_slot> slots;     // the fragment's tensors in `delta`
  std::vector<tensor_slot> placed;    // the same tensors in the flat buffer
  std::vector<float> saved_residual;  // a non-participant's residual, set aside
  std::vector<float> gathered;        // outer_node_mean
  allreduce_config flight_cfg;        // what the thread runs (the caller's may go away)
  std::thread flight;
  status flight_status;
  phase_times times;
  std::uint64_t sync_start = 0;  // times.bytes_sent before the sync's agreement
  std::uint64_t last_sync_bytes = 0;
  // The reduction counts into flight_times, merged into `times` once it is done, so that
  // times() read while a sync is in flight never races with the engine's thread.
  phase_times flight_times;
  double flight_s = 0;  // the sync's wall time (on whichever thread ran it)
  double sync_s = 0, exposed_s = 0;

  void merge_flight() {
    last_sync_bytes = times.bytes_sent - sync_start + flight_times.bytes_sent;
    times += flight_times;
    flight_times = {};
    sync_s += flight_s;
    flight_s = 0;
  }

  void join() {
    if (flight.joinable()) flight.join();
  }
  ~impl() { join(); }
};

outer_workspace::outer_workspace() : impl_(std::make_unique<impl>()) {}
outer_workspace::~outer_workspace() = default;
outer_workspace::outer_workspace(outer_workspace&&) noexcept = default;
outer_workspace& outer_workspace::operator=(outer_workspace&&) noexcept = default;
const phase_times& outer_workspace::times() const noexcept { return impl_->times; }
std::uint64_t outer_workspace::last_sync_bytes() const noexcept { return impl_->last_sync_bytes; }
double outer_workspace::sync_seconds() const noexcept { return impl_->sync_s; }
double outer_workspace::exposed_seconds() const noexcept { return impl_->exposed_s; }

namespace {

using detail::fnv1a;
using detail::splitmix64;

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// 2 (0.4.0): fragments assigned largest tensor first; 3: a tensor that overflows its
// fragment's share is split at a row. A rank or state of an earlier protocol is another
// configuration.
constexpr std::uint64_t outer_protocol = 3;
// The participation draw's tensor id: no codec context uses it (fragments are 0..P-1).
constexpr std::uint64_t participation_stream = 0x6F75746572ull;  // "outer"

std::uint64_t bits(float x) noexcept { return std::bit_cast<std::uint32_t>(x); }

std::uint64_t fingerprint_of(const outer_config& cfg, std::uint64_t n, int world) noexcept {
  const allreduce_config& r = cfg.reduce;
  std::uint64_t h = fnv1a(to_string(r.spec));
  for (std::uint64_t v :
       {outer_protocol, n, static_cast<std::uint64_t>(world), static_cast<std::uint64_t>(r.how),
        static_cast<std::uint64_t>(r.uncompressed),
        static_cast<std::uint64_t>(resolved_error_feedback(r)), r.segment_elements,
        std::uint64_t{cfg.sync_every}, std::uint64_t{cfg.fragments}, std::uint64_t{cfg.delay},
        bits(cfg.mix), bits(cfg.lr), bits(cfg.momentum), static_cast<std::uint64_t>(cfg.nesterov),
        std::uint64_t{cfg.participants}, cfg.seed})
    h = splitmix64(h ^ v);
  for (const tensor_slot& s : r.tensors)
    h = splitmix64(splitmix64(splitmix64(h ^ s.offset) ^ s.n) ^ s.rows);
  return h | 1;  // 0 means "not initialized"
}

enum class outer_reason : std::uint16_t {
  bad_view = 1,
  bad_state = 3,
  participation_in_hierarchy = 4,
  // The configuration's rules, one code each so that every rank's message names the one
  // broken (a status holds 119 characters).
  fragments_out_of_range = 5,
  fragments_over_tensors = 6,
  delay_too_long = 7,
  mix_out_of_range = 8,
  momentum_out_of_range = 9,
  lr_not_finite = 10,
  participants_over_ranks = 11,
  not_averaged = 12,
  tensor_outside = 13,
};

const char* reason_text(outer_reason r) noexcept {
  switch (r) {
    case outer_reason::bad_view: return "its parameters are not an f32 view of the state's size";
    case outer_reason::bad_state:
      return "its outer state is not initialized or belongs to another configuration";
    case outer_reason::participation_in_hierarchy:
      return "partial participation is not defined over a hierarchy";
    case outer_reason::fragments_out_of_range: return "fragments must be 1..sync_every";
    case outer_reason::fragments_over_tensors: return "fragments exceed the model's tensors";
    case outer_reason::delay_too_long: return "delay exceeds sync_every / fragments";
    case outer_reason::mix_out_of_range: return "mix is not in [0, 1]";
    case outer_reason::momentum_out_of_range: return "momentum is not in [0, 1)";
    case outer_reason::lr_not_finite: return "lr is not finite";
    case outer_reason::participants_over_ranks: return "participants exceed the ranks";
    case outer_reason::not_averaged: return "reduce.average is false (Δ is averaged)";
    case outer_reason::tensor_outside: return "a tensor lies outside the parameters";
  }
  return "unknown reason";
}

std::optional<outer_reason> config_problem(const outer_config& c, std::uint64_t n,
                                           int world) noexcept {
  if (c.fragments < 1 || c.sync_every < c.fragments) return outer_reason::fragments_out_of_range;
  if (c.delay > c.sync_every / c.fragments) return outer_reason::delay_too_long;
  if (!(c.mix >= 0.0f && c.mix <= 1.0f)) return outer_reason::mix_out_of_range;
  if (!std::isfinite(c.lr)) return outer_reason::lr_not_finite;
  if (!(c.momentum >= 0.0f && c.momentum < 1.0f)) return outer_reason::momentum_out_of_range;
  if (c.participants > static_cast<std::uint32_t>(world))
    return outer_reason::participants_over_ranks;
  if (!c.reduce.average) return outer_reason::not_averaged;
  if (!c.reduce.tensors.empty()) {
    if (c.reduce.tensors.size() < c.fragments) return outer_reason::fragments_over_tensors;
    for (const tensor_slot& s : c.reduce.tensors)
      if (s.offset > n || s.n > n - s.offset) return outer_reason::tensor_outside;
  }
  return std::nullopt;
}

// What every rank of a sync must hold alike, and its failures (comm's agreement checks
// them, before the call's own).
struct outer_fields {
  static constexpr int count = 16;
  std::uint64_t v[count] = {};
  std::uint64_t failure = ~std::uint64_t{0};    // (rank << 16) | reason of the lowest failing rank
  std::uint64_t nonfinite = ~std::uint64_t{0};  // the lowest rank whose Δ is not finite
};

constexpr const char* field_names[outer_fields::count] = {"the outer protocol",
                                                          "sync_every",
                                                          "fragments",
                                                          "delay",
                                                          "mix",
                                                          "lr",
                                                          "momentum",
                                                          "nesterov",
                                                          "participants",
                                                          "seed",
                                                          "the element count",
                                                          "the inner step",
                                                          "the round",
                                                          "the codec configuration",
                                                          "the communicator size",
                                                          "hierarchy"};

outer_fields fields_of(const outer_config& c, std::uint64_t n, int world, std::uint64_t step,
                       std::uint64_t rounds, bool hierarchical, std::uint64_t fingerprint) {
  outer_fields f;
  const std::uint64_t v[outer_fields::count] = {outer_protocol,
                                                c.sync_every,
                                                c.fragments,
                                                c.delay,
                                                bits(c.mix),
                                                bits(c.lr),
                                                bits(c.momentum),
                                                c.nesterov ? 1u : 0u,
                                                c.participants,
                                                c.seed,
                                                n,
                                                step,
                                                rounds,
                                                fingerprint,
                                                static_cast<std::uint64_t>(world),
                                                hierarchical ? 1u : 0u};
  std::copy(std::begin(v), std::end(v), std::begin(f.v));
  return f;
}

//! The sync's checks, in the order they decide: the fields, a rank's own failure, a rank
//! whose Δ after inner step `step` is not finite. `f` must outlive them.
void outer_checks(const outer_fields& f, std::uint64_t step, detail::check out[3]) {
  out[0] = {f.v, detail::no_failure,
            [](int i, std::uint64_t lo, std::uint64_t hi, std::uint64_t) {
              if (i == 13) return detail::disagreement("outer", field_names[i], {}, {});
              return detail::disagreement("outer", field_names[i], std::to_string(lo),
                                          std::to_string(hi));
            },
            0};
  out[1] = {{},
            f.failure,
            [](int, std::uint64_t failure, std::uint64_t, std::uint64_t) {
              return detail::rank_failure("outer", failure, "sync",
                                          reason_text(static_cast<outer_reason>(failure & 0xFFFF)));
            },
            0};
  out[2] = {{},
            f.nonfinite,
            [](int, std::uint64_t rank, std::uint64_t, std::uint64_t at) -> status {
              return {status_code::nonfinite_input,
                      std::string("outer: the pseudo-gradient of rank ")
                          .append(std::to_string(rank))
                          .append(" is not finite after inner step ")
                          .append(std::to_string(at))
                          .append("; no rank sent or applied this sync")};
            },
            step};
}

bool view_ok(const tensor_view& v, std::uint64_t n) noexcept {
  return v.type == dtype::f32 && v.n == n && (n == 0 || v.data != nullptr);
}

//! θ_global, the momentum and θ_local of fragment `p` after the reduced Δ arrived.
void apply(const outer_config& cfg, int world, outer_state& s, std::span<const tensor_slot> placed,
           std::span<const float> d, float* local, bool late) {
  // With K < W participants the reduced mean over W becomes the participants' mean.
  const bool partial =
      cfg.participants != 0 && cfg.participants < static_cast<std::uint32_t>(world);
  const float scale = static_cast<float>(world) / static_cast<float>(cfg.participants);
  const float mu = cfg.momentum, step = -cfg.lr, alpha = cfg.mix;
  std::uint64_t k = 0;
  for (const tensor_slot& t : placed) {
    for (std::uint64_t j = t.offset; j < t.offset + t.n; ++j, ++k) {
      const float dk = partial ? d[k] * scale : d[k];
      float u = dk;
      if (mu != 0.0f) {
        float& m = s.momentum[j];
        m = std::fma(mu, m, dk);
        u = cfg.nesterov ? std::fma(mu, m, dk) : m;
      }
      float& g = s.global[j];
      g = std::fma(step, u, g);
      local[j] = late ? std::fma(alpha, local[j] - g, g) : g;
    }
  }
}

void place_fragment(const outer_config& cfg, std::uint64_t n, std::uint32_t p,
                    outer_workspace::impl& w) {
  w.placed = outer_fragment(cfg, n, p);
  w.slots.resize(w.placed.size());
  std::uint64_t at = 0;
  for (std::size_t i = 0; i < w.placed.size(); ++i) {
    w.slots[i] = {at, w.placed[i].n, w.placed[i].rows};
    at += w.placed[i].n;
  }
  w.delta.resize(at);
}

status step_impl(communicator& world, const hierarchy* h, const outer_config& cfg,
                 tensor_view local, outer_state& s, outer_workspace& ws) {
  auto& w = ws.get();
  const std::uint64_t n = s.global.size();
  const int size = world.size();
  const std::uint64_t t = s.step + 1;
  float* params = static_cast<float*>(local.data);
  const bool local_ok = s.initialized() && view_ok(local, n);

  // 1. The sync sent τ steps ago.
  if (s.pending_fragment >= 0 && s.pending_step == t) {
    if (!local_ok) return {status_code::invalid_argument, "outer_step: bad parameters or state"};
    if (auto st = outer_settle(s, ws); !st.ok()) return st;
    place_fragment(cfg, n, static_cast<std::uint32_t>(s.pending_fragment), w);
    apply(cfg, size, s, w.placed, s.pending, params, true);
    s.pending_fragment = -1;
    s.pending_ready = false;
    s.pending.clear();
  }
  s.step = t;

  // 2. The fragment due now, by the schedule the state was made with.
  const std::int64_t due = s.initialized() ? outer_fragment_due(s.sync_every, s.fragments, t) : -1;
  if (due < 0)
    return local_ok ? status{}
                    : status{status_code::invalid_argument,
                             "outer_step: the state is not initialized "
                             "(outer_init) or the parameters do not match it"};

  const std::uint64_t fingerprint = fingerprint_of(cfg, n, size);
  outer_fields f = fields_of(cfg, n, size, t, s.rounds, h != nullptr, fingerprint);
  std::optional<outer_reason> bad;
  if (!view_ok(local, n))
    bad = outer_reason::bad_view;
  else if (auto problem = config_problem(cfg, n, size))
    bad = problem;
  else if (s.fingerprint != fingerprint || s.reduce.size() != cfg.fragments)
    bad = outer_reason::bad_state;
  else if (h != nullptr && cfg.participants != 0)
    bad = outer_reason::participation_in_hierarchy;
  const auto p = static_cast<std::uint32_t>(due);
  if (!bad) {
    // 3. Δ = θ_global − θ_local over the fragment's tensors, packed.
    place_fragment(cfg, n, p, w);
    bool finite = true;
    std::uint64_t k = 0;
    for (const tensor_slot& ts : w.placed)
      for (std::uint64_t j = ts.offset; j < ts.offset + ts.n; ++j, ++k) {
        w.delta[k] = s.global[j] - params[j];
        finite = finite && std::isfinite(w.delta[k]);
      }
    if (!finite) f.nonfinite = static_cast<std::uint64_t>(world.rank());
  } else {
    f.failure = detail::failure_word(world.rank(), static_cast<std::uint16_t>(*bad));
  }
  // 4. Participation: a rank left out sends zeros, and its residual waits for its next turn.
  // A rank that failed its own checks takes part in the agreement only, which fails.
  allreduce_state* rs = bad ? nullptr : &s.reduce[p];
  const bool in = outer_participates(cfg, size, world.rank(), s.rounds);
  const bool set_aside = rs != nullptr && !in && !rs->worker_residual.empty();
  if (!in) std::fill(w.delta.begin(), w.delta.end(), 0.0f);
  if (set_aside) {
    w.saved_residual.swap(rs->worker_residual);
    rs->worker_residual.assign(w.saved_residual.size(), 0.0f);
  }
  w.flight_cfg = cfg.reduce;
  w.flight_cfg.tensors =
      rs != nullptr ? std::span<const tensor_slot>(w.slots) : std::span<const tensor_slot>();
  const context ctx{cfg.seed, s.rounds, p};
  w.sync_start = w.times.bytes_sent;
  // The agreement (the sync's checks first, then the call's: one collective) and the
  // reduction, inline (τ = 0) or on the workspace's thread; timed from here, so that a
  // delayed sync's time includes starting its thread.
  const auto start = std::chrono::steady_clock::now();
  auto sync = [&world, h, ctx, f, t, rs, &w, set_aside, start]() -> status {
    detail::check checks[3];
    outer_checks(f, t, checks);
    allreduce_state unused;  // a failed rank's: its agreement fails before any state is made
    const tensor_view d =
        rs != nullptr ? view(std::span<float>(w.delta)) : tensor_view{nullptr, 0, dtype::f32, 0};
    status st =
        detail::allreduce_checked(world, h, w.flight_cfg, ctx, d, d, rs != nullptr ? *rs : unused,
                                  w.reduce, &w.flight_times, checks);
    if (set_aside) rs->worker_residual.swap(w.saved_residual);
    w.flight_s = seconds_since(start);
    return st;
  };

  // 5. Blocking: applied now. Delayed: the sync runs while the next τ inner steps do, and
  // its outcome (a disagreement or a non-finite Δ included) is known when it is applied.
  if (cfg.delay == 0) {
    const status st = sync();
    w.exposed_s += w.flight_s;
    w.merge_flight();
    if (!st.ok()) return st;
    ++s.rounds;
    apply(cfg, size, s, w.placed, w.delta, params, false);
    return {};
  }
  s.pending_fragment = due;
  s.pending_step = t + cfg.delay;
  s.pending_ready = false;
  w.flight = std::thread([&w, sync] { w.flight_status = sync(); });
  return {};
}

}  // namespace

std::vector<tensor_slot> outer_fragment(const outer_config& cfg, std::uint64_t n, std::uint32_t p) {
  std::vector<tensor_slot> out;
  const std::uint64_t parts = std::max<std::uint32_t>(cfg.fragments, 1);
  if (cfg.reduce.tensors.empty()) {
    const std::uint64_t lo = n * p / parts, hi = n * (p + 1) / parts;
    out.push_back({lo, hi - lo, 0});
    return out;
  }
  // Largest first (by index on ties), each tensor joins the fragment with the fewest
  // elements so far (the lowest on ties): round robin over tensors of equal size. A tensor
  // larger than that fragment's room below ceil(total / P) gives it the whole rows that
  // fit (one row at least) and the rest goes on the same way, so that no fragment ends a
  // row or more above the share and the peak sync is the mean one. Slots stay in order.
  const std::span<const tensor_slot> tensors = cfg.reduce.tensors;
  std::vector<std::size_t> order(tensors.size());
  std::uint64_t total = 0;
  for (std::size_t i = 0; i < order.size(); ++i) {
    order[i] = i;
    total += tensors[i].n;
  }
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t a, std::size_t b) { return tensors[a].n > tensors[b].n; });
  const std::uint64_t share = (total + parts - 1) / parts;
  std::vector<std::uint64_t> load(parts, 0);
  for (const std::size_t i : order) {
    const tensor_slot& t = tensors[i];
    const std::uint64_t row = t.rows != 0 ? t.n / t.rows : 1;
    for (std::uint64_t at = 0; at < t.n;) {
      const auto to =
          static_cast<std::size_t>(std::min_element(load.begin(), load.end()) - load.begin());
      const std::uint64_t left = t.n - at, room = share - std::min(share, load[to]);
      const std::uint64_t take = left <= room ? left : std::max(row, room / row * row);
      if (to == p) out.push_back({t.offset + at, take, t.rows != 0 ? take / row : 0});
      load[to] += take;
      at += take;
    }
  }
  std::sort(out.begin(), out.end(),
            [](const tensor_slot& a, const tensor_slot& b) { return a.offset < b.offset; });
  return out;
}

std::int64_t outer_fragment_due(std::uint32_t sync_every, std::uint32_t fragments,
                                std::uint64_t t) noexcept {
  const std::uint64_t hsteps = sync_every, parts = fragments;
  if (t == 0 || hsteps == 0 || parts == 0 || parts > hsteps) return -1;
  const std::uint64_t phase = t % hsteps;
  for (std::uint64_t p = 0; p < parts; ++p)
    if ((p + 1) * hsteps / parts % hsteps == phase) return static_cast<std::int64_t>(p);
  return -1;
}

bool outer_participates(const outer_config& cfg, int world, int rank,
                        std::uint64_t round) noexcept {
  const auto w = static_cast<std::uint64_t>(world);
  if (cfg.participants == 0 || cfg.participants >= w) return true;
  // A partial Fisher–Yates shuffle of 0..W-1: the first K places are the participants.
  std::vector<int> order(w);
  for (std::uint64_t i = 0; i < w; ++i) order[i] = static_cast<int>(i);
  const auto rng = blocks::counter_rng::make(cfg.seed, round, participation_stream);
  for (std::uint64_t i = 0; i < cfg.participants; ++i) {
    const std::uint64_t j = i + blocks::scale_u32(rng.at(blocks::rng_stream::selection, i), w - i);
    std::swap(order[i], order[j]);
    if (order[i] == rank) return true;
  }
  return false;
}

status outer_init(communicator& comm, const outer_config& cfg, tensor_view local,
                  outer_state& state) {
  const std::uint64_t n = local.n;
  const std::uint64_t fingerprint = fingerprint_of(cfg, n, comm.size());
  outer_fields f = fields_of(cfg, n, comm.size(), 0, 0, false, fingerprint);
  if (!view_ok(local, n))
    f.failure =
        detail::failure_word(comm.rank(), static_cast<std::uint16_t>(outer_reason::bad_view));
  else if (auto problem = config_problem(cfg, n, comm.size()))
    f.failure = detail::failure_word(comm.rank(), static_cast<std::uint16_t>(*problem));
  memory_ops* mem = comm.memory_services();
  if (mem == nullptr)
    return {status_code::backend_unavailable,
            std::string("outer_init: this build cannot use the memory of the '")
                .append(comm.name())
                .append("' communicator")};
  detail::check checks[3];
  outer_checks(f, 0, checks);
  detail::buffer staging;
  if (auto st = detail::agree(comm, *mem, staging, checks, nullptr); !st.ok()) return st;
  if (n > 0)
    if (auto st = comm.broadcast(local.data, n * 4, 0); !st.ok()) return st;
  outer_state s;
  s.fingerprint = fingerprint;
  s.sync_every = cfg.sync_every;
  s.fragments = cfg.fragments;
  s.delay = cfg.delay;
  const auto* p = static_cast<const float*>(local.data);
  s.global.assign(p, p + n);
  if (cfg.momentum != 0.0f) s.momentum.assign(n, 0.0f);
  s.reduce.resize(cfg.fragments);
  state = std::move(s);
  return {};
}

status outer_step(communicator& comm, const outer_config& cfg, tensor_view local,
                  outer_state& state, outer_workspace& ws) {
  return step_impl(comm, nullptr, cfg, local, state, ws);
}

status outer_step(const hierarchy& h, const outer_config& cfg, tensor_view local,
                  outer_state& state, outer_workspace& ws) {
  if (h.world == nullptr)
    return {status_code::invalid_argument, "outer_step: hierarchy without a world communicator"};
  return step_impl(*h.world, &h, cfg, local, state, ws);
}

status outer_node_mean(const hierarchy& h, tensor_view values, outer_workspace& ws) {
  if (h.intra == nullptr)
    return {status_code::invalid_argument, "outer_node_mean: hierarchy without a node"};
  if (values.type != dtype::f32 || (values.n > 0 && values.data == nullptr))
    return {status_code::invalid_argument, "outer_node_mean: values must be an f32 view"};
  auto& w = ws.get();
  communicator& node = *h.intra;
  const std::uint64_t n = values.n;
  const auto size = static_cast<std::uint64_t>(node.size());
  w.gathered.resize(n * size);
  if (auto st = node.allgather(values.data, n * 4, w.gathered.data()); !st.ok()) return st;
  w.times.bytes_sent += n * 4;
  w.times.bytes_received += n * 4 * size;
  w.times.collectives += 1;
  const float alpha = 1.0f / static_cast<float>(size);
  auto* out = static_cast<float*>(values.data);
  for (std::uint64_t j = 0; j < n; ++j) {
    float acc = 0.0f;
    for (std::uint64_t r = 0; r < size; ++r) acc = std::fma(alpha, w.gathered[r * n + j], acc);
    out[j] = acc;
  }
  return {};
}

status outer_settle(outer_state& state, outer_workspace& ws) {
  auto& w = ws.get();
  if (state.pending_fragment < 0 || state.pending_ready) return {};
  if (!w.flight.joinable())
    return {status_code::invalid_argument,
            "outer_settle: the state's sync is in flight in another workspace"};
  const auto wait_start = std::chrono::steady_clock::now();
  w.flight.join();
  w.exposed_s += seconds_since(wait_start);
  w.merge_flight();
  if (!w.flight_status.ok()) {
    // Nothing was reduced on any rank: the sync is dropped, as a blocking one would be.
    state.pending_fragment = -1;
    return w.flight_status;
  }
  ++state.rounds;
  state.pending = w.delta;
  state.pending_ready = true;
  return {};
}

}  // namespace gradcodec::comm
