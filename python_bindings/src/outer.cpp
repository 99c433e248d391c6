// SPDX-License-Identifier: Apache-2.0
//! @file
//! The outer synchronizer (gradcodec/comm/outer.hpp) from Python: gradcodec._gradcodec.
//! OuterSync (the engine, its state and its workspace) over a Communicator
//! (communicator.hpp). The engine is the C++ one: a torch job moves exactly the bytes a C++
//! job does.
#include <nanobind/stl/function.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/tuple.h>

#include <cstring>
#include <memory>
#include <string>
#include <tuple>
#include <unordered_map>

#include "common.hpp"
#include "communicator.hpp"
#include "gradcodec/comm/outer.hpp"

namespace gradcodec::python {

namespace {

//! The engine with its configuration, state and workspace.
class outer_sync {
 public:
  outer_sync(communicator_handle& c, gcc::outer_config cfg, std::vector<gcc::tensor_slot> tensors)
      : comm_(*c.comm), cfg_(std::move(cfg)), tensors_(std::move(tensors)) {
    cfg_.reduce.tensors = tensors_;
  }
  ~outer_sync() {
    // A reduction in flight calls back into Python: let it finish without the GIL.
    nb::gil_scoped_release nogil;
    ws_ = gcc::outer_workspace{};
  }

  void init(const out_array& params) {
    tensor_view v = host_params(params);
    check(without_gil([&] { return gcc::outer_init(comm_, cfg_, v, state_); }));
  }
  //! Returns whether the call changed `params` (a sync applied).
  bool step(const out_array& params) {
    tensor_view v = host_params(params);
    const bool applies = due_now();
    check(without_gil([&] { return gcc::outer_step(comm_, cfg_, v, state_, ws_); }));
    return applies;
  }
  //! Whether the next step() reads or writes the parameters (a sync is sent or applied).
  [[nodiscard]] bool due_now() const {
    const std::uint64_t t = state_.step + 1;
    return gcc::outer_fragment_due(state_.sync_every, state_.fragments, t) >= 0 ||
           (state_.pending_fragment >= 0 && state_.pending_step == t);
  }
  void settle() {
    check(without_gil([&] { return gcc::outer_settle(state_, ws_); }));
  }
  nb::bytes save() {
    settle();
    std::string out(gcc::outer_state_bytes(state_), '\0');
    unwrap(gcc::save_outer_state(state_, {reinterpret_cast<std::byte*>(out.data()), out.size()}));
    return nb::bytes(out.data(), out.size());
  }
  void load(const in_array& bytes) {
    const_bytes b = bytes_in(bytes, "state", "a saved state is read on the host");
    settle();
    check(gcc::load_outer_state(b, state_));
  }
  nb::object global() const {
    void* data = nullptr;
    nb::object a = numpy_empty({state_.global.size()}, "float32", &data);
    if (!state_.global.empty()) std::memcpy(data, state_.global.data(), state_.global.size() * 4);
    return a;
  }
  const gcc::outer_state& state() const { return state_; }
  const gcc::phase_times& times() const { return ws_.times(); }
  [[nodiscard]] std::uint64_t last_sync_bytes() const { return ws_.last_sync_bytes(); }
  [[nodiscard]] double sync_seconds() const { return ws_.sync_seconds(); }
  [[nodiscard]] double exposed_seconds() const { return ws_.exposed_seconds(); }

 private:
  tensor_view host_params(const out_array& params) const {
    call_device dev;
    exec_options opt;
    tensor_view v = tensor_out(params, "params", dev, opt);
    if (dev.cuda())
      raise_error(status_code::invalid_argument,
                  "OuterSync: params must be in host memory (the engine's arrays are)");
    if (v.type != dtype::f32 || params.ndim() != 1)
      raise_error(status_code::invalid_argument, "OuterSync: params must be a 1-D float32 array");
    return v;
  }

  gcc::communicator& comm_;
  gcc::outer_config cfg_;
  std::vector<gcc::tensor_slot> tensors_;
  gcc::outer_state state_;
  gcc::outer_workspace ws_;
};

}  // namespace

void register_outer(nb::module_& m) {
  nb::class_<outer_sync>(m, "OuterSync", "The outer synchronizer (docs/outer.md).")
      .def(
          "__init__",
          [](outer_sync* self, communicator_handle& c, std::optional<std::string> spec,
             std::optional<std::string> strategy, std::optional<bool> error_feedback,
             std::uint32_t sync_every, std::uint32_t fragments, std::uint32_t delay, float mix,
             float lr, float momentum, bool nesterov, std::uint32_t participants,
             std::uint64_t seed,
             const std::vector<std::tuple<std::uint64_t, std::uint64_t, std::uint64_t>>& tensors,
             int threads) {
            gcc::outer_config cfg;
            if (spec) {
              cfg.reduce.spec = unwrap(parse_spec(*spec));
            } else {
              cfg.reduce.uncompressed = true;
            }
            if (strategy) cfg.reduce.how = unwrap(gcc::strategy_from_name(*strategy));
            cfg.reduce.error_feedback = error_feedback;
            cfg.reduce.threads = threads;
            cfg.sync_every = sync_every;
            cfg.fragments = fragments;
            cfg.delay = delay;
            cfg.mix = mix;
            cfg.lr = lr;
            cfg.momentum = momentum;
            cfg.nesterov = nesterov;
            cfg.participants = participants;
            cfg.seed = seed;
            std::vector<gcc::tensor_slot> slots;
            for (auto [o, n, r] : tensors) slots.push_back({o, n, r});
            new (self) outer_sync(c, cfg, std::move(slots));
          },
          nb::arg("comm"), nb::kw_only(), nb::arg("spec") = nb::none(),
          nb::arg("strategy") = nb::none(), nb::arg("error_feedback") = nb::none(),
          nb::arg("sync_every") = 1, nb::arg("fragments") = 1, nb::arg("delay") = 0,
          nb::arg("mix") = 0.5f, nb::arg("lr") = 1.0f, nb::arg("momentum") = 0.0f,
          nb::arg("nesterov") = false, nb::arg("participants") = 0, nb::arg("seed") = 0,
          nb::arg("tensors") =
              std::vector<std::tuple<std::uint64_t, std::uint64_t, std::uint64_t>>{},
          nb::arg("threads") = 0, nb::keep_alive<1, 2>(),
          "spec None: Δ travels uncompressed (the exact rank-ordered f32 mean). tensors: "
          "(offset, n, rows) of each model tensor in the flat parameter buffer.")
      .def("init", &outer_sync::init, nb::arg("params"),
           "Collective: rank 0's params into every rank's params; θ_global = params.")
      .def("step", &outer_sync::step, nb::arg("params"),
           "Collective after every inner step; True when params were changed.")
      .def_prop_ro("due", &outer_sync::due_now, "Whether the next step() reads or writes params.")
      .def("settle", &outer_sync::settle, "Waits for a sync in flight.")
      .def("save", &outer_sync::save, "The state's bytes (settles first).")
      .def("load", &outer_sync::load, nb::arg("state"))
      .def_prop_ro("global_params", &outer_sync::global, "A copy of θ_global.")
      .def_prop_ro("steps", [](const outer_sync& o) { return o.state().step; })
      .def_prop_ro("rounds", [](const outer_sync& o) { return o.state().rounds; })
      .def_prop_ro("pending", [](const outer_sync& o) { return o.state().pending_fragment; })
      .def_prop_ro(
          "in_flight",
          [](const outer_sync& o) {
            return o.state().pending_fragment >= 0 && !o.state().pending_ready;
          },
          "Whether a reduction was started and not yet waited for.")
      .def_prop_ro("bytes_sent", [](outer_sync& o) { return o.times().bytes_sent; })
      .def_prop_ro("bytes_received", [](outer_sync& o) { return o.times().bytes_received; })
      .def_prop_ro("collectives", [](outer_sync& o) { return o.times().collectives; })
      .def_prop_ro("last_sync_bytes", &outer_sync::last_sync_bytes,
                   "Bytes sent for the last completed sync (its agreement included).")
      .def_prop_ro("sync_seconds", &outer_sync::sync_seconds,
                   "Wall seconds of the completed syncs' agreements and reductions.")
      .def_prop_ro("exposed_seconds", &outer_sync::exposed_seconds,
                   "The part of sync_seconds the caller waited for.");

  m.def("outer_fragment_due", &gcc::outer_fragment_due, nb::arg("sync_every"), nb::arg("fragments"),
        nb::arg("step"), "The fragment sent after inner step `step` (from 1), or -1.");
}

}  // namespace gradcodec::python
