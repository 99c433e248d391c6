// SPDX-License-Identifier: Apache-2.0
//! @file
//! Python bindings of decode against an expected header (gradcodec/expected_decode.hpp):
//! decodes that leave their verdict in a 16-byte array on the frame's device instead of
//! waiting for the header, and the check of many such verdicts at once.
#include <cstring>

#include "common.hpp"

namespace gradcodec::python {

namespace {

void decode_expected_impl(const frame_header& expected, const in_array& frame_arr,
                          const out_array& out, const out_array& verdict_arr, float alpha,
                          bool accumulate, const std::string& backend_name, int threads) {
  exec_options opt;
  opt.where = backend_arg(backend_name);
  opt.threads = threads;
  call_device dev;
  const const_bytes frame = frame_in(frame_arr, "frame", dev, opt);
  const tensor_view view = tensor_out(out, accumulate ? "acc" : "out", dev, opt);
  const mutable_bytes verdict = bytes_out(verdict_arr, "verdict", dev, opt);
  if (verdict.size() != sizeof(frame_verdict))
    raise_error(status_code::invalid_argument, "verdict: a 1-D uint8 array of 16 bytes");
  const device_scope scope(dev, opt);
  const operation op = accumulate ? operation::decode_accumulate : operation::decode;
  workspace ws(unwrap(workspace_size(spec_of(expected), view, op, opt)), dev);
  opt.workspace = ws.bytes();
  auto* v = reinterpret_cast<frame_verdict*>(verdict.data());
  auto run = [&]() -> status {
    nb::gil_scoped_release nogil;
    return accumulate ? decode_accumulate_expected(expected, frame, view, alpha, v, opt)
                      : decode_expected(expected, frame, view, v, opt);
  };
  check(run());
}

//! Raises the first failed verdict of a host array of 16-byte verdicts, naming its index.
void check_verdicts_impl(const in_array& verdicts) {
  const const_bytes all =
      bytes_in(verdicts, "verdicts", "verdicts are read on the host (copy them with .cpu())");
  if (all.size() % sizeof(frame_verdict) != 0)
    raise_error(status_code::invalid_argument, "verdicts: a multiple of 16 bytes");
  for (std::size_t i = 0; i < all.size() / sizeof(frame_verdict); ++i) {
    frame_verdict v;
    std::memcpy(&v, all.data() + i * sizeof v, sizeof v);
    const status st = verdict_status(v);
    if (!st.ok())
      raise_error(
          st.code(),
          std::string("frame ").append(std::to_string(i)).append(": ").append(st.message()));
  }
}

}  // namespace

void register_expected(nb::module_& m) {
  m.def(
      "decode_expected",
      [](const frame_header& expected, const in_array& frame, const out_array& out,
         const out_array& verdict, const std::string& backend, int threads) {
        decode_expected_impl(expected, frame, out, verdict, 1.0f, false, backend, threads);
      },
      nb::arg("expected"), nb::arg("frame"), nb::arg("out"), nb::arg("verdict"), nb::kw_only(),
      nb::arg("backend") = "auto", nb::arg("threads") = 0,
      "Decodes frame into out when its header equals `expected` (a FrameInfo from peek of a\n"
      "frame of the same codec, parameters, n and dtype) in every field but the non-finite\n"
      "flag (and, for threshold and dgc, the count). The outcome goes into `verdict`, a\n"
      "1-D uint8 array of 16 bytes on the frame's device, and out is written only when it\n"
      "is good. On CUDA nothing waits: check the verdicts later with check_verdicts(v.cpu()).\n"
      "On the host a bad frame also raises at once.");
  m.def(
      "decode_accumulate_expected",
      [](const frame_header& expected, const in_array& frame, const out_array& acc,
         const out_array& verdict, float alpha, const std::string& backend, int threads) {
        decode_expected_impl(expected, frame, acc, verdict, alpha, true, backend, threads);
      },
      nb::arg("expected"), nb::arg("frame"), nb::arg("acc"), nb::arg("verdict"),
      nb::arg("alpha") = 1.0f, nb::kw_only(), nb::arg("backend") = "auto", nb::arg("threads") = 0,
      "acc += alpha * decode(frame) under the checks of decode_expected.");
  m.def("check_verdicts", &check_verdicts_impl, nb::arg("verdicts"),
        "Raises gradcodec.Error for the first verdict (of a host uint8 array of 16-byte\n"
        "verdicts, e.g. shape (k, 16)) that is not good, naming its index and the cause.");
}

}  // namespace gradcodec::python
