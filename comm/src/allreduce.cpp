// SPDX-License-Identifier: Apache-2.0
//! @file
//! The entry points: local checks, the configuration agreement, state set-up, dispatch to
//! a strategy, the hierarchical composition, and the bucketed form.
#include "gradcodec/comm/allreduce.hpp"

#include <algorithm>
#include <optional>
#include <string>

#include "comm/src/agreement.hpp"
#include "comm/src/buffers.hpp"
#include "comm/src/chunks.hpp"
#include "comm/src/collectives.hpp"
#include "comm/src/contexts.hpp"
#include "comm/src/dense_reduce.hpp"
#include "comm/src/run.hpp"
#include "comm/src/state_setup.hpp"
#include "comm/src/strategies/strategies.hpp"
#include "comm/src/workspace.hpp"
#include "gradcodec/bounds.hpp"

namespace gradcodec::comm {

namespace {

using namespace detail;

constexpr std::uint64_t protocol_version = 1;
constexpr std::uint64_t max_elements = std::uint64_t{1} << 48;

//! Fills the derived fields of a run (averaging, segments, chunk unit).
void configure(run& r, bool average) {
  r.world = r.comm.size();
  r.me = r.comm.rank();
  r.reported_rank = r.me;
  r.mean_over = average ? r.world : 1;
  r.alpha = 1.0f / static_cast<float>(r.mean_over);
  r.error_feedback = !r.cfg.uncompressed && resolved_error_feedback(r.cfg);
  const codec_id id = r.cfg.spec.id;
  if (!r.cfg.uncompressed && r.how == strategy::dense &&
      (id == codec_id::fp16 || id == codec_id::bf16)) {
    // Casts are pre-divided by W, then summed: the owner adds with weight 1.
    r.divisor = static_cast<float>(r.mean_over);
    r.alpha = 1.0f;
  }
  const std::uint64_t n = r.in.n;
  if (id == codec_id::powersgd && !r.cfg.uncompressed) {
    // One segment per tensor slot, and one per gap between slots (sent as vectors).
    auto& pieces = r.ws.powersgd.pieces;
    powersgd_pieces(n, r.in.rows, r.cfg.tensors, pieces);
    r.pieces = pieces;
    r.segments = pieces.size();
    r.unit = 1;
    r.seg_len = n;
    return;
  }
  r.unit = unit_of(r.cfg.spec);
  if (n == 0) return;
  r.seg_len =
      r.cfg.segment_elements == 0 ? n : (r.cfg.segment_elements + r.unit - 1) / r.unit * r.unit;
  r.segments = (n + r.seg_len - 1) / r.seg_len;
}

//! cfg.uncompressed: the inputs in f32, reduced densely in rank order, converted to out.
status run_uncompressed(run& r) {
  const std::uint64_t n = r.in.n;
  float* values = r.ws.prescaled.as<float>(n + 1, r.mem);
  if (!r.failed())
    if (auto st = r.mem.to_f32(r.in, 1.0f, values); !st.ok()) r.fail(st);
  if (auto st = dense_reduce(r, values, n, n, r.alpha, r.alpha); !st.ok()) return st;
  if (r.failed()) return r.outcome();
  return r.mem.from_f32(values, r.out);
}

status dispatch(run& r) {
  status st;
  if (r.cfg.uncompressed) return run_uncompressed(r);
  switch (r.how) {
    case strategy::allgather: st = run_allgather(r); break;
    case strategy::two_phase: st = run_two_phase(r); break;
    case strategy::majority_vote: st = run_majority_vote(r); break;
    case strategy::dense:
      if (r.cfg.spec.id == codec_id::randomk)
        st = run_randomk_dense(r);
      else if (r.cfg.spec.id == codec_id::powersgd)
        st = run_powersgd_dense(r);
      else
        st = run_two_phase(r);
      break;
    case strategy::automatic: st = {status_code::internal_error, "unresolved strategy"}; break;
  }
  if (!st.ok()) return st;
  return r.outcome();
}

bool overlap_ok(const_tensor_view in, tensor_view out) {
  const auto* a = static_cast<const std::byte*>(in.data);
  const auto* b = static_cast<const std::byte*>(out.data);
  const std::uint64_t la = in.n * dtype_size(in.type), lb = out.n * dtype_size(out.type);
  if (la == 0 || lb == 0) return true;
  if (a == b) return in.type == out.type;
  return a + la <= b || b + lb <= a;
}

//! The checks every rank makes on its own arguments; the first failing one.
std::optional<std::pair<local_reason, status>> check_local(const allreduce_config& cfg,
                                                           const_tensor_view in, tensor_view out,
                                                           const memory_ops& mem,
                                                           result<strategy>& how) {
  auto bad = [](local_reason r, status s) { return std::optional{std::pair{r, std::move(s)}}; };
  if (auto st = validate(cfg.spec); !st.ok()) return bad(local_reason::invalid_spec, st);
  how = resolve_strategy(cfg.spec.id, cfg.how);
  if (!how) return bad(local_reason::unsupported_strategy, how.error());
  const bool views_ok = dtype_valid(static_cast<std::uint8_t>(in.type)) &&
                        dtype_valid(static_cast<std::uint8_t>(out.type)) && in.n == out.n &&
                        in.n <= max_elements &&
                        (in.n == 0 || (in.data != nullptr && out.data != nullptr)) &&
                        (in.rows == 0 || in.n % in.rows == 0) && overlap_ok(in, out);
  if (!views_ok)
    return bad(local_reason::bad_views,
               {status_code::invalid_argument,
                "allreduce: in and out need equal n, valid dtypes, data, rows dividing n, "
                "and no partial overlap"});
  if (mem.space() == memory_space::device && cfg.spec.nonfinite == nonfinite_policy::error)
    return bad(local_reason::nonfinite_on_device,
               {status_code::invalid_argument,
                "allreduce: nonfinite=error needs a host scan; device memory takes "
                "nonfinite=propagate"});
  if (in.n > 0 && (!mem.accessible(in.data) || !mem.accessible(out.data)))
    return bad(local_reason::bad_views,
               {status_code::invalid_argument,
                "allreduce: in and out must be in the communicator's memory (device memory "
                "for a device communicator)"});
  if (auto st = check_slots(cfg.tensors, in.n); !st.ok()) return bad(local_reason::bad_tensors, st);
  return std::nullopt;
}

agreement fields_of(const allreduce_config& cfg, strategy how, const context& ctx,
                    const_tensor_view in, const allreduce_state& st, int world, bool hierarchical) {
  agreement a;
  std::uint64_t layout = splitmix64(in.rows);
  for (const tensor_slot& s : cfg.tensors)
    layout = splitmix64(splitmix64(splitmix64(layout ^ s.offset) ^ s.n) ^ s.rows);
  const std::uint64_t v[] = {(protocol_version << 8) | format_version,
                             hierarchical ? 1u : 0u,
                             static_cast<std::uint64_t>(how),
                             static_cast<std::uint64_t>(cfg.spec.id),
                             fnv1a(to_string(cfg.spec)),
                             in.n,
                             static_cast<std::uint64_t>(in.type),
                             layout,
                             cfg.segment_elements,
                             cfg.average ? 1u : 0u,
                             resolved_error_feedback(cfg) ? 1u : 0u,
                             cfg.pipeline ? 1u : 0u,
                             ctx.seed,
                             ctx.step,
                             ctx.tensor_id,
                             st.initialized() ? st.steps : 0,
                             static_cast<std::uint64_t>(world),
                             cfg.uncompressed ? 1u : 0u};
  static_assert(sizeof v == sizeof a.fields);
  std::copy(std::begin(v), std::end(v), std::begin(a.fields));
  return a;
}

//! Same memory and the same stream: buffers pass between the two without a copy or a wait.
bool same_memory(const memory_ops& a, const memory_ops& b) {
  return a.space() == b.space() && a.device() == b.device() && a.stream() == b.stream();
}

//! Copies n floats from one memory to another, one of them host memory.
status transfer(memory_ops& from_mem, const float* from, memory_ops& to_mem, float* to,
                std::uint64_t n) {
  if (to_mem.space() == memory_space::host) return from_mem.download(to, from, n * 4);
  return to_mem.upload(to, from, n * 4);
}

using local_failure = std::optional<std::pair<local_reason, status>>;

//! Where one call runs: the communicator of the compressed stage (the world, or this
//! rank's level of a hierarchy), the memories, and this rank's role.
struct call_layout {
  memory_ops* agree_mem = nullptr;  // the world's: the agreement's buffers
  memory_ops* data_mem = nullptr;   // in, out and the node sums
  communicator* stage = nullptr;    // where the compressed stage runs
  memory_ops* stage_mem = nullptr;  // the compressed stage's buffers and state
  state_role role = state_role::flat;
  local_failure problem;  // a hierarchy that does not fit together on this rank
};

//! The layout of a call on `world` (and `h`), or the unusable memory refusal, which needs
//! no agreement: every rank of a communicator has the same memory.
result<call_layout> lay_out(communicator& world, const hierarchy* h, const allreduce_config& cfg) {
  call_layout l;
  l.agree_mem = world.memory_services();
  if (l.agree_mem == nullptr)
    return status{
        status_code::backend_unavailable,
        std::string("allreduce: this build cannot run the strategies on the memory of the '")
            .append(world.name())
            .append("' communicator (a device communicator needs the CUDA backend)")};
  // Where in, out and the node sums live: the world's memory, or a hierarchy's node
  // memory (NCCL inside each node under an MPI world, say).
  l.data_mem = l.agree_mem;
  if (h != nullptr && h->intra != nullptr && h->intra->memory_services() != nullptr)
    l.data_mem = h->intra->memory_services();
  l.stage = &world;
  l.stage_mem = l.data_mem;
  if (h == nullptr) return l;
  // The node sum moves from the node's memory to the leaders' when they differ, through
  // the host: one of the two must be host memory.
  memory_ops* inter_mem = h->inter != nullptr ? h->inter->memory_services() : l.data_mem;
  const bool movable = inter_mem != nullptr && (same_memory(*inter_mem, *l.data_mem) ||
                                                inter_mem->space() == memory_space::host ||
                                                l.data_mem->space() == memory_space::host);
  const bool consistent = h->world == &world && h->intra != nullptr &&
                          h->intra->memory_services() != nullptr &&
                          (h->leader() == (h->inter != nullptr)) && movable;
  if (!consistent)
    l.problem = std::pair{local_reason::bad_hierarchy, status{status_code::invalid_argument,
                                                              "allreduce: inconsistent hierarchy"}};
  l.role = h->leader() ? state_role::leader : state_role::member;
  l.stage = h->leader() ? h->inter.get() : h->intra.get();
  if (l.stage != nullptr && l.stage->memory_services() != nullptr)
    l.stage_mem = l.stage->memory_services();
  if (!l.problem && l.stage_mem->space() == memory_space::device &&
      cfg.spec.nonfinite == nonfinite_policy::error)
    l.problem = std::pair{
        local_reason::nonfinite_on_device,
        status{status_code::invalid_argument, "allreduce: nonfinite=error needs a host scan"}};
  return l;
}

//! The agreement: the caller's checks, then the call's (or, without check_config and
//! nothing of the caller's to check, this rank's own failure alone).
status agree_on_call(communicator& world, const hierarchy* h, const allreduce_config& cfg,
                     strategy resolved, const context& ctx, const_tensor_view in,
                     const allreduce_state& state, workspace& ws, phase_times* times,
                     memory_ops& agree_mem, const local_failure& failure,
                     std::span<const check> prefix) {
  if (!cfg.check_config && prefix.empty()) return failure ? failure->second : status{};
  if (prefix.size() + 2 > max_checks)
    return {status_code::internal_error, "allreduce: more checks than the agreement holds"};
  agreement a = fields_of(cfg, resolved, ctx, in, state, world.size(), h != nullptr);
  if (failure)
    a.local_failure = failure_word(world.rank(), static_cast<std::uint16_t>(failure->first));
  check checks[max_checks];
  std::copy(prefix.begin(), prefix.end(), checks);
  call_checks(a, checks + prefix.size());
  return agree(world, agree_mem, ws.get().words, std::span<const check>(checks, prefix.size() + 2),
               times);
}

//! A hierarchical call after the agreement: the node's sum to its leader, the leaders'
//! compressed call over the node sums (`r`, this rank's run of the compressed stage, which
//! the leaders point at the node sum), then the leader's outcome and result broadcast in
//! the node.
status run_hierarchical(communicator& world, const hierarchy& h, const call_layout& l, run& r) {
  const allreduce_config& cfg = r.cfg;
  const const_tensor_view in = r.in;  // the leaders' run works on the node sum instead
  const tensor_view out = r.out;
  workspace::impl& ws = r.ws;
  phase_times* times = r.times;
  memory_ops& data_mem = *l.data_mem;
  memory_ops& stage_mem = *l.stage_mem;
  // 1. Sum the node's gradients (weighted 1/W_world for the mean) into the leader's buffer.
  const float alpha = cfg.average ? 1.0f / static_cast<float>(world.size()) : 1.0f;
  // When the levels' memories differ, the node level keeps buffers of its own: sharing
  // them would reallocate (cudaMalloc, cudaFree) on every call.
  const bool moved = !same_memory(stage_mem, data_mem);
  workspace::impl& node_ws = moved ? ws.node_level() : ws;
  run ri{*h.intra, cfg, r.how, r.ctx, in, out, r.st, node_ws, times, data_mem};
  configure(ri, false);
  ri.reported_rank = world.rank();
  float* node = node_ws.hierarchy.node.as<float>(in.n + 1, data_mem);
  if (auto st = dense_reduce_to_root(ri, in, node, alpha, 0); !st.ok()) return st;
  // 2. The leaders run the compressed allreduce (a sum) over the node sums. A leader
  // whose node failed still takes part, carrying the error word to the other leaders.
  std::uint64_t word = 0;
  status leader_status;
  if (h.leader()) {
    r.note(ri.poison);  // keeps a failure place_state recorded
    // The leaders' stage works on the node sum in its own memory (a copy when the
    // levels' memories differ). Failures from here on travel on, so no rank waits.
    float* sum = moved ? ws.hierarchy.staged.as<float>(in.n + 1, stage_mem) : node;
    if (moved && !r.failed())
      if (auto st = transfer(data_mem, node, stage_mem, sum, in.n); !st.ok()) r.fail(st);
    if (in.n > 0 && !stage_mem.accessible(sum))
      r.fail(
          {status_code::internal_error, "allreduce: the node sum is not in the leaders' memory"});
    r.in = {sum, in.n, dtype::f32, in.rows};
    r.out = {sum, in.n, dtype::f32, in.rows};
    leader_status = dispatch(r);
    if (leader_status.ok() && moved) leader_status = transfer(stage_mem, sum, data_mem, node, in.n);
    if (!leader_status.ok())
      word = r.poison != 0 ? r.poison : error_word(world.rank(), leader_status.code());
  }
  // 3. The leader broadcasts its outcome, then the result.
  {
    timer t(times, &phase_times::comm_s);
    std::byte* at = ws.hierarchy.node_word.reserve(sizeof word, data_mem);
    if (auto st = data_mem.upload(at, &word, sizeof word); !st.ok()) return st;
    if (auto st = h.intra->broadcast(at, sizeof word, 0); !st.ok()) return st;
    if (auto st = data_mem.download(&word, at, sizeof word); !st.ok()) return st;
  }
  if (word != 0) {
    if (!ri.local.ok()) return ri.local;
    return leader_status.ok() ? failure_status(word) : leader_status;
  }
  {
    timer t(times, &phase_times::comm_s);
    if (times) {
      times->bytes_sent += h.leader() ? in.n * 4 : 0;
      times->bytes_received += h.leader() ? 0 : in.n * 4;
      times->collectives += 1;
    }
    if (auto st = h.intra->broadcast(node, in.n * 4, 0); !st.ok()) return st;
  }
  if (auto st = data_mem.from_f32(node, out); !st.ok()) return st;
  return leader_status;
}

status entry(communicator& world, const hierarchy* h, const allreduce_config& cfg,
             const context& ctx, const_tensor_view in, tensor_view out, allreduce_state& state,
             workspace& ws, phase_times* times, std::span<const check> prefix) {
  // 1. Where the call runs, and this rank's own checks.
  auto layout = lay_out(world, h, cfg);
  if (!layout) return layout.error();
  const call_layout& l = layout.value();
  result<strategy> how = strategy::allgather;
  local_failure failure = check_local(cfg, in, out, *l.data_mem, how);
  if (!failure) failure = l.problem;
  const strategy resolved = how ? how.value() : strategy::automatic;
  // 2. The run record, and whether the state belongs to this configuration.
  std::optional<run> r;
  const std::uint64_t fp = config_fingerprint(cfg, resolved, in.n, in.rows, l.role);
  if (!failure && l.stage != nullptr) {
    r.emplace(run{*l.stage, cfg, resolved, ctx, in, out, state, ws.get(), times, *l.stage_mem});
    configure(*r, h == nullptr && cfg.average);
    if (h != nullptr) r->reported_rank = world.rank();  // error words name world ranks
    if (state.initialized() && !state_matches(*r, l.role, fp))
      failure = std::pair{local_reason::state_mismatch,
                          status{status_code::shape_mismatch,
                                 "allreduce: the state belongs to another configuration"}};
  }
  // 3. Every rank the same outcome, or none goes on.
  if (auto st = agree_on_call(world, h, cfg, resolved, ctx, in, state, ws, times, *l.agree_mem,
                              failure, prefix);
      !st.ok())
    return st;
  // 4. The state, in the stage's memory; a failure to move it travels in the block headers.
  if (!state.initialized()) init_state(*r, l.role, fp);
  if (auto st = place_state(*r); !st.ok()) r->fail(st);
  // 5. The call itself.
  const status result = h == nullptr ? dispatch(*r) : run_hierarchical(world, *h, l, *r);
  if (result.ok()) ++state.steps;
  return result;
}

}  // namespace

bool resolved_error_feedback(const allreduce_config& cfg) noexcept {
  return cfg.error_feedback.value_or(bounds(cfg.spec).feedback_safe);
}

status allreduce(communicator& comm, const allreduce_config& cfg, const context& ctx,
                 const_tensor_view in, tensor_view out, allreduce_state& state, workspace& ws,
                 phase_times* times) {
  return entry(comm, nullptr, cfg, ctx, in, out, state, ws, times, {});
}

status allreduce(const hierarchy& h, const allreduce_config& cfg, const context& ctx,
                 const_tensor_view in, tensor_view out, allreduce_state& state, workspace& ws,
                 phase_times* times) {
  if (h.world == nullptr)
    return {status_code::invalid_argument, "allreduce: hierarchy without a world communicator"};
  return entry(*h.world, &h, cfg, ctx, in, out, state, ws, times, {});
}

namespace detail {

status allreduce_checked(communicator& world, const hierarchy* h, const allreduce_config& cfg,
                         const context& ctx, const_tensor_view in, tensor_view out,
                         allreduce_state& state, workspace& ws, phase_times* times,
                         std::span<const check> prefix) {
  return entry(world, h, cfg, ctx, in, out, state, ws, times, prefix);
}

}  // namespace detail

status allreduce_tensors(communicator& comm, const allreduce_config& cfg, const context& ctx,
                         std::span<const tensor_view> tensors, allreduce_state& state,
                         workspace& ws, phase_times* times) {
  auto& w = ws.get();
  auto& slots = w.tensors.slots;
  slots.resize(tensors.size());
  std::vector<const_tensor_view> views(tensors.begin(), tensors.end());
  const std::uint64_t n = plan_bucket(views, slots);
  memory_ops* mem = comm.memory_services();
  if (mem == nullptr) return allreduce(comm, cfg, ctx, {}, {}, state, ws, times);  // its refusal
  float* flat = w.tensors.flat.as<float>(n + 1, *mem);
  const tensor_view fv{flat, n, dtype::f32, 0};
  // A packing error is local: it goes through the agreement as bad input so no rank hangs.
  status packed = pack_bucket(views, slots, fv, *mem);
  allreduce_config c = cfg;
  c.tensors = slots;
  const tensor_view target = packed.ok() ? fv : tensor_view{nullptr, n, dtype::f32, 0};
  if (auto st = allreduce(comm, c, ctx, target, target, state, ws, times); !st.ok())
    return packed.ok() ? st : packed;
  return unpack_bucket(fv, slots, tensors, *mem);
}

}  // namespace gradcodec::comm
