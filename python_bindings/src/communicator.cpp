// SPDX-License-Identifier: Apache-2.0
//! @file
//! The Communicator class: python_communicator (comm::communicator over a Python
//! transport) and the thread communicators.
#include "communicator.hpp"

#include <nanobind/stl/function.h>

#include <cstring>
#include <string>
#include <unordered_map>

#include "gradcodec/comm/thread_communicator.hpp"

namespace gradcodec::python {

namespace {

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

}  // namespace

void register_communicator(nb::module_& m) {
  nb::class_<communicator_handle>(
      m, "Communicator", "A communicator the outer synchronizer and the calibration run over.")
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
      .def_static(
          "mpi",
          [](double wait_poll) {
            if (!(wait_poll >= 0.0 && wait_poll <= 1.0))
              raise_error(status_code::invalid_argument,
                          "Communicator.mpi: wait_poll must be 0..1 seconds");
            auto h = std::make_unique<communicator_handle>();
            check(open_mpi_world(wait_poll, h->comm));
            return h.release();
          },
          nb::arg("wait_poll") = 1e-4, nb::rv_policy::take_ownership,
          "Over MPI_COMM_WORLD of a process started by mpirun (a duplicate per call: one per "
          "OuterSync): the collectives run in C++, with no Python call inside a sync. "
          "Initializes MPI (MPI_THREAD_MULTIPLE) unless the process did. wait_poll (seconds): "
          "the wait tests the request and sleeps this long between tests, leaving a core it "
          "shares with the training to the training while a delayed sync is in flight; 0 "
          "waits in MPI_Wait, which spins (docs/outer.md).")
      .def_static("mpi_built", &mpi_built, "Whether this extension was built with MPI.")
      .def_prop_ro("rank", [](const communicator_handle& h) { return h.comm->rank(); })
      .def_prop_ro("size", [](const communicator_handle& h) { return h.comm->size(); });
}

}  // namespace gradcodec::python
