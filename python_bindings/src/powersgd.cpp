// SPDX-License-Identifier: Apache-2.0
//! @file
//! The PowerSGD phase API and its checkpoint format for Python. The caller owns Q, P and
//! the residual as float32 arrays (numpy, torch CPU or CUDA tensors through DLPack) and
//! runs the two allreduces between the phases; gradcodec.PowerSGDState wraps this for one
//! matrix on the host. A phase whose arrays are CUDA tensors (all on one device) runs on
//! the CUDA backend, queued on torch's current stream of that device, like the codec
//! calls; the checkpoint functions read and write host memory only.

#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

#include <nanobind/stl/tuple.h>

#include "common.hpp"

namespace gradcodec::python {
namespace {

constexpr const char* kStateOnHost = "PowerSGD states are read on the host";

codec_spec powersgd_spec(nb::handle spec) {
  codec_spec s = spec_arg(spec);
  if (s.id != codec_id::powersgd)
    raise_error(status_code::invalid_argument, "powersgd: the spec is not a powersgd spec");
  return s;
}

//! q = M^T p: powersgd_compute_q for a writable p (orthonormalised in place first),
//! powersgd_project_q for a read-only one (already orthonormal).
template <class PArray>
void q_product(nb::handle spec, const PArray& p, const in_array& residual, std::uint64_t rows,
               std::uint64_t cols, const out_array& q) {
  constexpr bool orthogonalize = std::is_same_v<PArray, out_array>;
  const codec_spec s = powersgd_spec(spec);
  exec_options opt;
  call_device dev;
  const auto ps = [&] {
    if constexpr (orthogonalize)
      return f32_out(p, "p", dev, opt);
    else
      return f32_in(p, "p", dev, opt);
  }();
  const auto res = f32_in(residual, "residual", dev, opt);
  const auto qs = f32_out(q, "q", dev, opt);
  const device_scope scope(dev, opt);
  auto run = [&]() -> status {
    nb::gil_scoped_release nogil;
    if constexpr (orthogonalize)
      return powersgd_compute_q(s, ps, res, rows, cols, qs, opt);
    else
      return powersgd_project_q(s, ps, res, rows, cols, qs, opt);
  };
  check(run());
}

nb::dict info_dict(const powersgd_state_info& info) {
  nb::dict d;
  d["rows"] = info.rows;
  d["cols"] = info.cols;
  d["rank"] = info.rank;
  d["step"] = info.step;
  return d;
}

}  // namespace

void register_powersgd(nb::module_& m) {
  m.def(
      "powersgd_compresses",
      [](nb::handle spec, std::uint64_t rows, std::uint64_t cols) {
        return powersgd_compresses(powersgd_spec(spec), rows, cols);
      },
      nb::arg("spec"), nb::arg("rows"), nb::arg("cols"),
      "Whether a rows x cols matrix is worth compressing at the spec's rank and min_rate\n"
      "(rows*cols > min_rate*(rows+cols)*r; never for rows <= 1 or cols <= 1).");
  m.def(
      "powersgd_rank",
      [](nb::handle spec, std::uint64_t rows, std::uint64_t cols) {
        return powersgd_rank(powersgd_spec(spec), rows, cols);
      },
      nb::arg("spec"), nb::arg("rows"), nb::arg("cols"),
      "The effective rank r = min(rank, rows, cols).");
  m.def(
      "powersgd_init_q",
      [](nb::handle spec, std::uint64_t rows, std::uint64_t cols, const out_array& q,
         std::uint64_t seed, std::uint64_t tensor_id) {
        const codec_spec s = powersgd_spec(spec);
        exec_options opt;
        call_device dev;
        const auto qs = f32_out(q, "q", dev, opt);
        const device_scope scope(dev, opt);
        check(powersgd_init_q(s, context{seed, 0, tensor_id}, rows, cols, qs, opt));
      },
      nb::arg("spec"), nb::arg("rows"), nb::arg("cols"), nb::arg("q"), nb::kw_only(),
      nb::arg("seed") = 0, nb::arg("tensor_id") = 0,
      "Fills q (cols*r float32) with the shared-seed start: the same on every rank for the\n"
      "same seed and tensor_id.");
  m.def(
      "powersgd_compute_p",
      [](nb::handle spec, const in_array& grad, const out_array& residual, const in_array& q,
         const out_array& p, std::optional<std::uint64_t> rows) {
        const codec_spec s = powersgd_spec(spec);
        exec_options opt;
        call_device dev;
        const const_tensor_view g = tensor_in(grad, "grad", dev, opt, rows);
        const auto res = f32_out(residual, "residual", dev, opt);
        const auto qs = f32_in(q, "q", dev, opt);
        const auto ps = f32_out(p, "p", dev, opt);
        const device_scope scope(dev, opt);
        auto run = [&]() -> status {
          nb::gil_scoped_release nogil;
          return powersgd_compute_p(s, g, res, qs, ps, opt);
        };
        check(run());
      },
      nb::arg("spec"), nb::arg("grad"), nb::arg("residual"), nb::arg("q"), nb::arg("p"),
      nb::kw_only(), nb::arg("rows") = nb::none(),
      "Phase 1: residual += grad (the residual now holds M = grad + e); p = M q.\n"
      "grad: any float dtype, rows x cols (rows: shape[0] of a 2-D+ array, or rows=);\n"
      "residual: rows*cols float32; q: cols*r; p: rows*r. Allreduce-sum p next.");
  m.def(
      "powersgd_compute_q",
      [](nb::handle spec, const out_array& p, const in_array& residual, std::uint64_t rows,
         std::uint64_t cols, const out_array& q) { q_product(spec, p, residual, rows, cols, q); },
      nb::arg("spec"), nb::arg("p"), nb::arg("residual"), nb::arg("rows"), nb::arg("cols"),
      nb::arg("q"),
      "Phase 2: orthonormalises the summed p in place, then q = M^T p. Allreduce-sum q next.");
  m.def(
      "powersgd_finish",
      [](nb::handle spec, const in_array& p, const out_array& q, int world_size,
         const out_array& residual, const out_array& out, bool error_feedback,
         std::optional<std::uint64_t> rows) {
        const codec_spec s = powersgd_spec(spec);
        exec_options opt;
        call_device dev;
        tensor_view o = tensor_out(out, "out", dev, opt);
        o.rows = rows ? *rows : (out.ndim() >= 2 ? static_cast<std::uint64_t>(out.shape(0)) : 0);
        const auto ps = f32_in(p, "p", dev, opt);
        const auto qs = f32_out(q, "q", dev, opt);
        const auto res = f32_out(residual, "residual", dev, opt);
        const device_scope scope(dev, opt);
        auto run = [&]() -> status {
          nb::gil_scoped_release nogil;
          return powersgd_finish(s, ps, qs, world_size, error_feedback, res, o, opt);
        };
        check(run());
      },
      nb::arg("spec"), nb::arg("p"), nb::arg("q"), nb::arg("world_size"), nb::arg("residual"),
      nb::arg("out"), nb::kw_only(), nb::arg("error_feedback") = true, nb::arg("rows") = nb::none(),
      "Phase 3: q /= world_size (kept as the next warm start); out = p q^T (any float dtype,\n"
      "rows x cols); residual = M - out, or zero without error feedback.");
  m.def(
      "powersgd_orthogonalize",
      [](const out_array& a, std::uint64_t rows, std::uint32_t r, float eps) {
        exec_options opt;
        call_device dev;
        const auto as = f32_out(a, "a", dev, opt);
        const device_scope scope(dev, opt);
        check(powersgd_orthogonalize(as, rows, r, eps, opt));
      },
      nb::arg("a"), nb::arg("rows"), nb::arg("r"), nb::arg("eps") = 1e-8f,
      "Orthonormalises the r columns of a (rows x r float32, row-major) in place (modified\n"
      "Gram-Schmidt, docs/codecs.md).");
  m.def(
      "powersgd_project_q",
      [](nb::handle spec, const in_array& p, const in_array& residual, std::uint64_t rows,
         std::uint64_t cols, const out_array& q) { q_product(spec, p, residual, rows, cols, q); },
      nb::arg("spec"), nb::arg("p"), nb::arg("residual"), nb::arg("rows"), nb::arg("cols"),
      nb::arg("q"),
      "q = M^T p for an already orthonormal p (powersgd_compute_q is\n"
      "powersgd_orthogonalize, then this).");
  m.def(
      "powersgd_orthogonalize_batch",
      [](const out_array& a,
         const std::vector<std::tuple<std::uint64_t, std::uint64_t, std::uint32_t>>& matrices,
         float eps) {
        exec_options opt;
        call_device dev;
        const auto as = f32_out(a, "a", dev, opt);
        std::vector<powersgd_matrix> batch;
        for (const auto& [offset, rows, r] : matrices) {
          if (offset > as.size() || rows * r > as.size() - offset)
            throw nb::value_error("powersgd_orthogonalize_batch: a matrix lies past the array");
          batch.push_back({as.subspan(offset, rows * r), rows, r});
        }
        const device_scope scope(dev, opt);
        auto run = [&]() -> status {
          nb::gil_scoped_release nogil;
          return powersgd_orthogonalize_batch(batch, eps, opt);
        };
        check(run());
      },
      nb::arg("a"), nb::arg("matrices"), nb::arg("eps") = 1e-8f,
      "Orthonormalises, in place, each matrix (offset, rows, r) of the float32 array a\n"
      "(rows x r, row-major, from element offset): the same bits as one\n"
      "powersgd_orthogonalize each, in one launch per 64 matrices on a GPU.");
  m.def("powersgd_state_bytes", &powersgd_state_bytes, nb::arg("rows"), nb::arg("cols"),
        nb::arg("rank"), "Bytes of a saved state (0 for an invalid shape).");
  m.def(
      "powersgd_save_state",
      [](const in_array& q, const in_array& residual, std::uint64_t rows, std::uint64_t cols,
         std::uint32_t rank, std::uint64_t step) {
        const powersgd_state_info info{rows, cols, rank, step};
        const auto qs = f32_host_in(q, "q", kStateOnHost);
        const auto res = f32_host_in(residual, "residual", kStateOnHost);
        const std::uint64_t size = powersgd_state_bytes(rows, cols, rank);
        void* p = nullptr;
        nb::object buf = numpy_empty({static_cast<std::size_t>(size)}, "uint8", &p);
        unwrap(powersgd_save_state(info, qs, res,
                                   {static_cast<std::byte*>(p), static_cast<std::size_t>(size)}));
        return buf;
      },
      nb::arg("q"), nb::arg("residual"), nb::arg("rows"), nb::arg("cols"), nb::arg("rank"),
      nb::arg("step") = 0,
      "Saves Q, the residual and a step counter in the library's checkpoint format\n"
      "(docs/format.md); returns a numpy uint8 array.");
  m.def(
      "powersgd_peek_state",
      [](const in_array& state) {
        return info_dict(unwrap(powersgd_peek_state(bytes_in(state, "state", kStateOnHost))));
      },
      nb::arg("state"),
      "Checks a saved state (header, sizes, checksum) and returns its rows, cols, rank, step.");
  m.def(
      "powersgd_load_state",
      [](const in_array& state, std::uint64_t rows, std::uint64_t cols, std::uint32_t rank,
         const out_array& q, const out_array& residual) {
        return info_dict(unwrap(powersgd_load_state(
            bytes_in(state, "state", kStateOnHost), rows, cols, rank,
            f32_host_out(q, "q", kStateOnHost), f32_host_out(residual, "residual", kStateOnHost))));
      },
      nb::arg("state"), nb::arg("rows"), nb::arg("cols"), nb::arg("rank"), nb::arg("q"),
      nb::arg("residual"),
      "Checks a saved state against the expected shape and copies Q and the residual out;\n"
      "returns its rows, cols, rank and step.");
}

}  // namespace gradcodec::python
