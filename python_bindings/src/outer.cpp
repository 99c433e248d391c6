// SPDX-License-Identifier: Apache-2.0
//! @file
//! The outer synchronizer (gradcodec/comm/outer.hpp) from Python: gradcodec._gradcodec.
//! Communicator (a comm::communicator over a Python transport object, such as
//! gradcodec.torch's transport over a torch.distributed process group, or W thread
//! communicators of one process for tests) and OuterSync (the engine, its state and its
//! workspace). The engine is the C++ one: a torch job moves exactly the bytes a C++ job does.
#include <nanobind/stl/function.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/tuple.h>

#include <cstring>
#include <memory>
#include <string>
#include <tuple>
#include <unordered_map>

#include "common.hpp"
#include "gradcodec/comm/outer.hpp"
#include "gradcodec/comm/thread_communicator.hpp"

namespace gradcodec::python {

namespace {

namespace gcc = gradcodec::comm;

//! A NumPy view of `count` elements at `data` that does not own them: valid for the
//! duration of one transport call.
template <class T>
nb::object numpy_view(const void* data, std::uint64_t count) {
  const std::size_t shape[1] = {static_cast<std::size_t>(count)};
  static T empty{};
  void* p = count == 0 ? &empty : const_cast<void*>(data);
  // rv_policy::reference: without an owner, the default policy would hand out a copy.
  return nb::cast(nb::ndarray<nb::numpy, T, nb::ndim<1>>(p, 1, shape, nb::handle()),
                  nb::rv_policy::reference);
}

nb::list size_list(std::span<const std::uint64_t> sizes) {
  nb::list l;
  for (std::uint64_t s : sizes) l.append(s);
  return l;
}

//! comm::communicator over a Python object with rank, size and the methods
//! allgatherv(send, recv, sizes), alltoallv(send, send_sizes, recv, recv_sizes),
//! allreduce(buf, op), broadcast(buf, root) and barrier(), all blocking, on NumPy views
//! (uint8, or the element type of allreduce). Non-blocking calls complete when posted, as
//! the thread communicator's do; a Python exception becomes comm_error with its text.
class python_communicator final : public gcc::communicator {
 public:
  explicit python_communicator(nb::object transport) : transport_(std::move(transport)) {
    rank_ = nb::cast<int>(transport_.attr("rank"));
    size_ = nb::cast<int>(transport_.attr("size"));
  }
  ~python_communicator() override {
    nb::gil_scoped_acquire gil;
    transport_.reset();
  }

  [[nodiscard]] int rank() const noexcept override { return rank_; }
  [[nodiscard]] int size() const noexcept override { return size_; }
  [[nodiscard]] std::string_view name() const noexcept override { return "python"; }

  status iallgatherv(const void* send, std::uint64_t send_bytes, void* recv,
                     std::span<const std::uint64_t> recv_bytes, gcc::request& req) override {
    if (auto st = check_allgatherv(send_bytes, recv_bytes); !st.ok()) return st;
    std::uint64_t total = 0;
    for (std::uint64_t b : recv_bytes) total += b;
    return complete(req, [&] {
      transport_.attr("allgatherv")(numpy_view<std::uint8_t>(send, send_bytes),
                                    numpy_view<std::uint8_t>(recv, total), size_list(recv_bytes));
    });
  }

  status ialltoallv(const void* send, std::span<const std::uint64_t> send_bytes, void* recv,
                    std::span<const std::uint64_t> recv_bytes, gcc::request& req) override {
    if (send_bytes.size() != static_cast<std::size_t>(size_) ||
        recv_bytes.size() != static_cast<std::size_t>(size_))
      return {status_code::invalid_argument, "alltoallv: one size per rank"};
    std::uint64_t out = 0, in = 0;
    for (std::uint64_t b : send_bytes) out += b;
    for (std::uint64_t b : recv_bytes) in += b;
    return complete(req, [&] {
      transport_.attr("alltoallv")(numpy_view<std::uint8_t>(send, out), size_list(send_bytes),
                                   numpy_view<std::uint8_t>(recv, in), size_list(recv_bytes));
    });
  }

  status iallreduce(const void* send, void* recv, std::uint64_t count, gcc::element_type type,
                    gcc::reduce_op op, gcc::request& req) override {
    const std::uint64_t bytes = count * gcc::element_size(type);
    if (send != recv && bytes > 0) std::memmove(recv, send, bytes);
    // Unsigned words travel as signed ones of the same width: sums wrap alike, and max/min
    // keep their order once the sign bit is flipped.
    const bool flip = op != gcc::reduce_op::sum &&
                      (type == gcc::element_type::u32 || type == gcc::element_type::u64);
    auto flip_sign = [&] {
      if (!flip) return;
      if (type == gcc::element_type::u64)
        for (std::uint64_t i = 0; i < count; ++i)
          static_cast<std::uint64_t*>(recv)[i] ^= 1ull << 63;
      else
        for (std::uint64_t i = 0; i < count; ++i) static_cast<std::uint32_t*>(recv)[i] ^= 1u << 31;
    };
    flip_sign();
    const char* op_name = op == gcc::reduce_op::sum   ? "sum"
                          : op == gcc::reduce_op::max ? "max"
                                                      : "min";
    auto st = complete(req, [&] {
      nb::object view;
      switch (type) {
        case gcc::element_type::u8: view = numpy_view<std::uint8_t>(recv, count); break;
        case gcc::element_type::i32:
        case gcc::element_type::u32: view = numpy_view<std::int32_t>(recv, count); break;
        case gcc::element_type::i64:
        case gcc::element_type::u64: view = numpy_view<std::int64_t>(recv, count); break;
        case gcc::element_type::f32: view = numpy_view<float>(recv, count); break;
        case gcc::element_type::f64: view = numpy_view<double>(recv, count); break;
      }
      transport_.attr("allreduce")(view, op_name);
    });
    flip_sign();
    return st;
  }

  status ibroadcast(void* buf, std::uint64_t bytes, int root, gcc::request& req) override {
    return complete(
        req, [&] { transport_.attr("broadcast")(numpy_view<std::uint8_t>(buf, bytes), root); });
  }

  status wait(gcc::request& req) override {
    if (!req.active()) return {};
    auto it = done_.find(req.id());
    req = gcc::request{};
    if (it == done_.end()) return {status_code::invalid_argument, "wait: unknown request"};
    status st = it->second;
    done_.erase(it);
    return st;
  }

  status barrier() override {
    gcc::request req;
    if (auto st = complete(req, [&] { transport_.attr("barrier")(); }); !st.ok()) return st;
    return wait(req);
  }

  status split(int, int, std::unique_ptr<gcc::communicator>&) override {
    return {status_code::invalid_argument,
            "split: a Python transport cannot be split (make one per process group instead)"};
  }

 private:
  //! Runs one transport call under the GIL and records its outcome as a finished request.
  template <class F>
  status complete(gcc::request& req, F&& call) {
    status st;
    {
      nb::gil_scoped_acquire gil;
      try {
        call();
      } catch (nb::python_error& e) {
        st = {status_code::comm_error, std::string("transport: ").append(e.what())};
      } catch (std::exception& e) {
        st = {status_code::comm_error, std::string("transport: ").append(e.what())};
      }
    }
    req = gcc::request{next_++};
    done_.emplace(req.id(), st);
    return {};
  }

  nb::object transport_;
  int rank_ = 0, size_ = 1;
  std::uint64_t next_ = 1;
  std::unordered_map<std::uint64_t, status> done_;
};

//! What Python holds: a communicator (Python transport or thread communicator).
struct communicator_handle {
  std::unique_ptr<gcc::communicator> comm;
};

//! Runs an engine call without the GIL (the transport takes it back for each collective);
//! its status is raised once the GIL is held again.
template <class F>
status without_gil(F&& call) {
  nb::gil_scoped_release nogil;
  return call();
}

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
  nb::class_<communicator_handle>(m, "Communicator",
                                  "A communicator the outer synchronizer runs over.")
      .def_static(
          "from_transport",
          [](nb::object transport) {
            auto h = std::make_unique<communicator_handle>();
            h->comm = std::make_unique<python_communicator>(std::move(transport));
            return h.release();
          },
          nb::arg("transport"), nb::rv_policy::take_ownership,
          "Over a Python transport (rank, size, allgatherv, alltoallv, allreduce, broadcast, "
          "barrier), e.g. gradcodec.torch's over a torch.distributed process group.")
      .def_static(
          "threads",
          [](int size) {
            nb::list out;
            for (auto& c : gcc::thread_communicator::create(size)) {
              auto h = std::make_unique<communicator_handle>();
              h->comm = std::move(c);
              out.append(nb::cast(h.release(), nb::rv_policy::take_ownership));
            }
            return out;
          },
          nb::arg("size"),
          "`size` communicators of one process, one per thread (tests, simulations).")
      .def_prop_ro("rank", [](const communicator_handle& h) { return h.comm->rank(); })
      .def_prop_ro("size", [](const communicator_handle& h) { return h.comm->size(); });

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
