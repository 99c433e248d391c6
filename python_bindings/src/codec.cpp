// SPDX-License-Identifier: Apache-2.0
//! @file
//! The codec API for Python: Codec (a spec), encode / encode_with_feedback into numpy
//! frames or a caller's buffer, decode / decode_accumulate into any float array, peek,
//! the majority vote, codec and backend queries. Arrays are never copied: numpy arrays
//! through the buffer protocol, torch tensors and others through DLPack.

#include <cstring>
#include <string>
#include <vector>

#include "common.hpp"
#include "gradcodec/blocks/codec_traits.hpp"
#include "gradcodec/blocks/minifloat.hpp"

namespace gradcodec::python {
namespace {

//! Why the majority vote refuses device arrays: the library's vote runs on the host.
constexpr const char* kVoteOnHost = "the majority vote runs on the host";

constexpr const char* kEncodeKwargsDoc = R"(
    seed, step, tensor_id: the context that keys every random decision; every rank of a
        job passes the same values (step advances once per training step).
    backend: "auto" (default), "reference", "cpu" or "cuda"; every backend writes the same
        bytes.
    rows: matrix rows for codecs that need a shape (PowerSGD); default: shape[0] of an
        array with two or more dimensions, else flat.
    threads: CPU backend threads (0: the library default).
    out: optional writable 1-D uint8 buffer (numpy array or torch tensor, on the input's
        device) to encode into; the frame returned is then out[:size], a view of it.
    CUDA tensors run on the CUDA backend, on torch's current stream of their device, with
    every array of the call on that device.)";

struct encode_args {
  std::uint64_t seed = 0, step = 0, tensor_id = 0;
  std::string backend = "auto";
  std::optional<std::uint64_t> rows;
  int threads = 0;
  nb::object out;
};

nb::object encode_impl(const codec_spec& spec, const in_array& input, const out_array* residual,
                       const encode_args& a) {
  exec_options opt;
  opt.where = backend_arg(a.backend);
  opt.threads = a.threads;
  call_device dev;
  const const_tensor_view in = tensor_in(input, "input", dev, opt, a.rows);
  tensor_view res{};
  if (residual != nullptr) res = tensor_out(*residual, "residual", dev, opt);
  mutable_bytes dst;
  if (!a.out.is_none()) {
    out_array o;
    if (!nb::try_cast(a.out, o, false)) throw nb::type_error("out must be a writable uint8 array");
    dst = bytes_out(o, "out", dev, opt);
  }
  const device_scope scope(dev, opt);
  const context ctx{a.seed, a.step, a.tensor_id};
  const operation op = residual != nullptr ? operation::encode_with_feedback : operation::encode;
  workspace ws(unwrap(workspace_size(spec, in, op, opt)), dev);
  opt.workspace = ws.bytes();

  nb::object frame = a.out;
  std::uint64_t bound = 0;
  if (a.out.is_none()) {
    // A CUDA input gets a CUDA frame (torch.uint8 on its device), a host input numpy's.
    bound = encode_bound(spec, in.n, in.type, in.rows);
    void* p = nullptr;
    frame = new_array({static_cast<std::size_t>(bound)}, "uint8", dev, &p);
    dst = {static_cast<std::byte*>(p), static_cast<std::size_t>(bound)};
  }
  auto run = [&]() -> result<std::size_t> {
    nb::gil_scoped_release nogil;
    if (residual != nullptr) return encode_with_feedback(spec, ctx, in, res, dst, opt);
    return encode(spec, ctx, in, dst, opt);
  };
  const std::size_t written = unwrap(run());
  if (a.out.is_none() && written == bound) return frame;
  nb::object view = frame[nb::slice(written)];
  // A variable-size host frame (threshold) far below its bound should not pin the bound's
  // memory. A CUDA frame stays a view: a copy would be a second device allocation and a
  // kernel on the caller's stream for what torch's caching allocator recycles anyway.
  if (a.out.is_none() && !dev.cuda() && written * 2 < bound) return view.attr("copy")();
  return view;
}

std::vector<std::size_t> shape_arg(nb::handle shape, std::uint64_t n) {
  std::vector<std::size_t> dims;
  if (shape.is_none()) {
    dims.push_back(static_cast<std::size_t>(n));
    return dims;
  }
  if (nb::isinstance<nb::int_>(shape)) {
    dims.push_back(nb::cast<std::size_t>(shape));
  } else {
    for (nb::handle d : shape) dims.push_back(nb::cast<std::size_t>(d));
  }
  std::uint64_t total = 1;
  for (std::size_t d : dims) total *= d;
  if (total != n)
    raise_error(status_code::shape_mismatch, std::string("shape has ")
                                                 .append(std::to_string(total))
                                                 .append(" elements, the frame has ")
                                                 .append(std::to_string(n)));
  return dims;
}

//! A new array for a decode result on the frame's device (numpy, or torch for CUDA):
//! dtype from the argument or the frame; bf16 frames decode to float32 unless asked for
//! bf16, which numpy lacks (host frames then need out=).
nb::object new_output(const frame_header& h, nb::handle shape, nb::handle type,
                      const call_device& dev, tensor_view& v) {
  dtype t = type.is_none() ? (h.type == dtype::bf16 ? dtype::f32 : h.type) : dtype_arg(type);
  if (t == dtype::bf16 && !dev.cuda())
    raise_error(status_code::invalid_argument,
                "numpy has no bfloat16: pass out= (e.g. a torch.bfloat16 tensor) instead");
  void* p = nullptr;
  nb::object arr = new_array(shape_arg(shape, h.n), dtype_full_name(t), dev, &p);
  v = {p, h.n, t, 0};
  return arr;
}

nb::object decode_impl(const in_array& frame_arr, nb::handle out, nb::handle shape, nb::handle type,
                       const std::string& backend_name, int threads) {
  exec_options opt;
  opt.where = backend_arg(backend_name);
  opt.threads = threads;
  call_device dev;
  const const_bytes frame = frame_in(frame_arr, "frame", dev, opt);
  tensor_view view{};
  nb::object res;
  if (!out.is_none()) {
    out_array o;
    if (!nb::try_cast(out, o, false)) throw nb::type_error("out must be a writable float array");
    view = tensor_out(o, "out", dev, opt);
    res = nb::borrow(out);
  }
  // After every array is noted: a CUDA frame's header is read only once the call is known
  // to be all-device.
  const frame_header h = header_of(frame, dev);
  const device_scope scope(dev, opt);
  if (out.is_none()) res = new_output(h, shape, type, dev, view);
  workspace ws(unwrap(workspace_size(spec_of(h), view, operation::decode, opt)), dev);
  opt.workspace = ws.bytes();
  auto run = [&]() -> status {
    nb::gil_scoped_release nogil;
    return decode(frame, view, opt);
  };
  check(run());
  return res;
}

void decode_accumulate_impl(const in_array& frame_arr, const out_array& acc, float alpha,
                            const std::string& backend_name, int threads) {
  exec_options opt;
  opt.where = backend_arg(backend_name);
  opt.threads = threads;
  call_device dev;
  const const_bytes frame = frame_in(frame_arr, "frame", dev, opt);
  const tensor_view view = tensor_out(acc, "acc", dev, opt);
  const frame_header h = header_of(frame, dev);
  const device_scope scope(dev, opt);
  workspace ws(unwrap(workspace_size(spec_of(h), view, operation::decode_accumulate, opt)), dev);
  opt.workspace = ws.bytes();
  auto run = [&]() -> status {
    nb::gil_scoped_release nogil;
    return decode_accumulate(frame, view, alpha, opt);
  };
  check(run());
}

//! peek for Python: host frames directly, CUDA frames through a copy of their header.
frame_header peek_impl(const in_array& frame_arr) {
  exec_options opt;
  call_device dev;
  return header_of(frame_in(frame_arr, "frame", dev, opt), dev);
}

nb::object vote_impl(const std::vector<in_array>& frames, nb::handle out, float alpha,
                     nb::handle shape, nb::handle type) {
  std::vector<const_bytes> views;
  views.reserve(frames.size());
  for (const auto& f : frames) views.push_back(bytes_in(f, "frame", kVoteOnHost));
  if (views.empty()) raise_error(status_code::invalid_argument, "the vote needs at least 1 frame");
  const frame_header h = unwrap(peek(views.front()));
  exec_options opt;
  call_device dev;
  tensor_view view{};
  nb::object res;
  if (out.is_none()) {
    const nb::object t = type.is_none() ? nb::object(nb::str("f32")) : nb::borrow(type);
    res = new_output(h, shape, t, dev, view);
  } else {
    out_array o;
    if (!nb::try_cast(out, o, false)) throw nb::type_error("out must be a writable float array");
    require_host(o.device_type(), o.device_id(), "out", kVoteOnHost);
    view = tensor_out(o, "out", dev, opt);
    res = nb::borrow(out);
  }
  auto run = [&]() -> status {
    nb::gil_scoped_release nogil;
    return sign_majority_vote(views, view, alpha);
  };
  check(run());
  return res;
}

// --- spec helpers ---------------------------------------------------------------------

std::string param_text(nb::handle v) {
  if (nb::isinstance<nb::bool_>(v)) return nb::cast<bool>(v) ? "1" : "0";
  if (nb::isinstance<nb::str>(v)) return nb::cast<std::string>(v);
  return nb::cast<std::string>(nb::repr(v));
}

codec_spec make_codec(nb::handle spec, const nb::kwargs& params) {
  std::string text =
      nb::isinstance<nb::str>(spec) ? nb::cast<std::string>(spec) : to_string(spec_arg(spec));
  bool first = text.find(':') == std::string::npos;
  for (auto [key, value] : params) {
    text.append(first ? ":" : ",")
        .append(nb::cast<std::string>(key))
        .append("=")
        .append(param_text(value));
    first = false;
  }
  return unwrap(parse_spec(text));
}

const char* rounding_name(rounding_mode r) {
  return r == rounding_mode::nearest ? "nearest" : "stochastic";
}

nb::object param_value(const codec_spec& s, std::string_view key) {
  if (key == "ratio") return nb::float_(s.ratio);
  if (key == "k") return nb::int_(s.k);
  if (key == "sample") return nb::float_(s.sample);
  if (key == "unbiased") return nb::bool_(s.unbiased);
  if (key == "tau") return nb::float_(static_cast<double>(s.tau));
  if (key == "cap") return nb::int_(s.cap);
  if (key == "levels") return nb::int_(s.levels);
  if (key == "bucket" || key == "block") return nb::int_(s.bucket);
  if (key == "fmt") {
    const std::string_view f = element_format_name(s.fmt);
    return nb::str(f.data(), f.size());
  }
  if (key == "rotate") return nb::bool_(s.rotate);
  if (key == "bits") return nb::int_(s.bits);
  if (key == "rounding") return nb::str(rounding_name(s.rounding));
  if (key == "norm") return nb::str(s.norm == norm_kind::l2 ? "l2" : "max");
  if (key == "clip") return nb::float_(static_cast<double>(s.clip));
  if (key == "scale")
    return nb::str(s.scale == scale_kind::none   ? "none"
                   : s.scale == scale_kind::mean ? "mean"
                                                 : "l2");
  if (key == "rank") return nb::int_(s.rank);
  if (key == "eps") return nb::float_(static_cast<double>(s.eps));
  if (key == "min_rate") return nb::float_(static_cast<double>(s.min_rate));
  if (key == "nonfinite")
    return nb::str(s.nonfinite == nonfinite_policy::propagate ? "propagate" : "error");
  return nb::none();
}

nb::dict params_of(const codec_spec& s) {
  nb::dict d;
  for (const param_info& p : info(s.id).params)
    d[nb::str(p.key.data(), p.key.size())] = param_value(s, p.key);
  return d;
}

nb::str sv(std::string_view s) { return nb::str(s.data(), s.size()); }

//! The comm strategies that carry the codec's frames (allgather carries every codec's).
nb::dict collectives_dict(const collective_support& c) {
  nb::dict d;
  d["allgather"] = true;
  d["two_phase"] = c.two_phase;
  d["dense"] = c.dense;
  d["majority_vote"] = c.majority_vote;
  return d;
}

nb::dict info_dict(const codec_info& c) {
  nb::dict d;
  d["name"] = sv(c.name);
  d["id"] = static_cast<int>(c.id);
  d["summary"] = sv(c.summary);
  d["bits_per_element"] = sv(c.bits_per_element);
  d["unbiased"] = c.unbiased;
  nb::list params;
  for (const param_info& p : c.params) {
    nb::dict pd;
    pd["key"] = sv(p.key);
    pd["default"] = sv(p.default_value);
    pd["range"] = sv(p.range);
    pd["doc"] = sv(p.doc);
    params.append(pd);
  }
  d["params"] = params;
  nb::dict header;
  header["count"] = sv(c.header.count);
  header["group"] = sv(c.header.group);
  header["level"] = sv(c.header.level);
  header["param"] = sv(c.header.param);
  d["header"] = header;
  d["collectives"] = collectives_dict(c.collectives);
  return d;
}

nb::dict bounds_dict(const codec_spec& s, std::uint64_t n) {
  const codec_bounds b = bounds(s, n);
  nb::dict d;
  d["unbiased"] = b.unbiased;
  d["variance"] = b.variance;
  d["max_relative"] = b.max_relative;
  d["max_absolute"] = b.max_absolute;
  d["feedback_safe"] = b.feedback_safe;
  d["residual_gain"] = b.residual_gain;
  d["reason"] = sv(b.reason);
  return d;
}

operation operation_arg(const std::string& name) {
  if (name == "encode") return operation::encode;
  if (name == "encode_with_feedback") return operation::encode_with_feedback;
  if (name == "decode") return operation::decode;
  if (name == "decode_accumulate") return operation::decode_accumulate;
  raise_error(
      status_code::invalid_argument,
      "unknown operation '" + name + "' (encode, encode_with_feedback, decode, decode_accumulate)");
}

std::size_t workspace_query(const codec_spec& spec, std::uint64_t n, const std::string& op,
                            nb::handle type, std::uint64_t rows, const std::string& backend_name) {
  exec_options opt;
  opt.where = backend_arg(backend_name);
  return unwrap(workspace_size(spec, const_tensor_view{nullptr, n, dtype_arg(type), rows},
                               operation_arg(op), opt));
}

nb::dict header_dict(const frame_header& h) {
  nb::dict d;
  d["version"] = h.version;
  d["codec"] = sv(codec_name(h.codec));
  d["dtype"] = sv(dtype_name(h.type));
  d["flags"] = h.flags;
  d["n"] = h.n;
  d["payload_bytes"] = h.payload_bytes;
  d["frame_bytes"] = h.frame_bytes();
  d["count"] = h.count;
  d["group"] = h.group;
  d["level"] = h.level;
  d["mode"] = h.mode;
  d["param"] = static_cast<double>(h.param);
  return d;
}

}  // namespace

void register_codec(nb::module_& m) {
  nb::enum_<status_code>(m, "StatusCode", nb::is_arithmetic(),
                         "The library's status codes (stable numbers; gradcodec.Error.code).")
      .value("ok", status_code::ok)
      .value("invalid_argument", status_code::invalid_argument)
      .value("invalid_spec", status_code::invalid_spec)
      .value("output_too_small", status_code::output_too_small)
      .value("workspace_too_small", status_code::workspace_too_small)
      .value("corrupt_frame", status_code::corrupt_frame)
      .value("unsupported_version", status_code::unsupported_version)
      .value("shape_mismatch", status_code::shape_mismatch)
      .value("nonfinite_input", status_code::nonfinite_input)
      .value("backend_unavailable", status_code::backend_unavailable)
      .value("device_error", status_code::device_error)
      .value("comm_error", status_code::comm_error)
      .value("internal_error", status_code::internal_error);

  m.attr("__version__") = version_string;
  m.attr("header_bytes") = header_bytes;
  m.attr("format_version") = format_version;

  nb::class_<codec_spec>(m, "Codec",
                         "A codec and its parameters, from a spec string such as\n"
                         "'qsgd:levels=7,bucket=512' (docs/codecs.md lists every parameter).\n"
                         "Keyword arguments add parameters: Codec('topk', ratio=0.05).")
      .def(
          "__init__",
          [](codec_spec* self, nb::handle spec, const nb::kwargs& params) {
            new (self) codec_spec(make_codec(spec, params));
          },
          nb::arg("spec"), nb::arg("params"))
      .def_prop_ro(
          "name", [](const codec_spec& s) { return std::string(codec_name(s.id)); },
          "The codec's name, e.g. 'topk'.")
      .def_prop_ro(
          "id", [](const codec_spec& s) { return static_cast<int>(s.id); },
          "The codec id stored in frame headers.")
      .def_prop_ro(
          "spec", [](const codec_spec& s) { return to_string(s); },
          "The canonical spec string (parses back to an equal Codec).")
      .def_prop_ro("params", &params_of, "The codec's parameters as a dict (typed values).")
      .def_prop_ro(
          "traits",
          [](const codec_spec& s) {
            const blocks::codec_traits t = blocks::traits_of(s.id);
            nb::dict d;
            d["selects"] = t.selects;
            d["indexed"] = t.indexed;
            d["count_from_data"] = t.count_from_data;
            d["size_from_data"] = t.size_from_data;
            d["bucketed"] = t.bucketed;
            d["matrix"] = t.matrix;
            d["by_rows"] = t.by_rows;
            d["rounds"] = t.rounds;
            d["block_scaled"] = t.block_scaled;
            return d;
          },
          "What the layers ask of the codec (gradcodec/blocks/codec_traits.hpp): selects, "
          "indexed, count_from_data, size_from_data, bucketed, matrix, by_rows, rounds, "
          "block_scaled.")
      .def_prop_ro(
          "collectives",
          [](const codec_spec& s) { return collectives_dict(info(s.id).collectives); },
          "The collective strategies of gradcodec's comm layer that carry the codec's frames "
          "(its descriptor's): allgather, two_phase, dense, majority_vote.")
      .def_prop_ro(
          "info", [](const codec_spec& s) { return info_dict(info(s.id)); },
          "Summary, bits per element, bias and parameter documentation of the codec.")
      .def("bounds", &bounds_dict, nb::arg("n") = 0,
           "The codec's error bounds for a tensor of n elements (0: any size) and whether\n"
           "error feedback keeps its residual bounded (docs/codecs.md, 'Error bounds and\n"
           "error feedback'): a dict with unbiased, variance (bound on E||x^ - x||^2 /\n"
           "||x||^2), max_relative and max_absolute (||x^ - x||_inf <= max_relative *\n"
           "||x||_inf + max_absolute), feedback_safe, residual_gain and reason.")
      .def("__str__", [](const codec_spec& s) { return to_string(s); })
      .def("__repr__", [](const codec_spec& s) { return "Codec('" + to_string(s) + "')"; })
      .def("__eq__", [](const codec_spec& a, const codec_spec& b) { return a == b; })
      .def("__eq__", [](const codec_spec&, nb::handle) { return false; })
      .def("__hash__", [](const codec_spec& s) { return nb::hash(nb::str(to_string(s).c_str())); })
      .def("__getstate__", [](const codec_spec& s) { return to_string(s); })
      .def("__setstate__",
           [](codec_spec* self, const std::string& text) {
             new (self) codec_spec(unwrap(parse_spec(text)));
           })
      .def(
          "encode_bound",
          [](const codec_spec& s, std::uint64_t n, nb::handle type, std::uint64_t rows) {
            return encode_bound(s, n, dtype_arg(type), rows);
          },
          nb::arg("n"), nb::arg("dtype") = "f32", nb::arg("rows") = 0,
          "The most bytes an encode of n elements can write (header included). Exact for\n"
          "every codec but threshold and PowerSGD without rows.")
      .def("workspace_size", &workspace_query, nb::arg("n"), nb::arg("operation") = "encode",
           nb::arg("dtype") = "f32", nb::arg("rows") = 0, nb::arg("backend") = "auto",
           "Scratch bytes an operation needs (the bindings allocate it themselves).")
      .def(
          "encode",
          [](const codec_spec& s, const in_array& input, std::uint64_t seed, std::uint64_t step,
             std::uint64_t tensor_id, const std::string& backend, std::optional<std::uint64_t> rows,
             int threads, nb::object out) {
            return encode_impl(s, input, nullptr,
                               {seed, step, tensor_id, backend, rows, threads, std::move(out)});
          },
          nb::arg("input"), nb::kw_only(), nb::arg("seed") = 0, nb::arg("step") = 0,
          nb::arg("tensor_id") = 0, nb::arg("backend") = "auto", nb::arg("rows") = nb::none(),
          nb::arg("threads") = 0, nb::arg("out") = nb::none(),
          (std::string("Encodes a float32/float16/bfloat16 array (numpy, torch, any DLPack\n"
                       "array; C-contiguous, never copied) into a frame: a numpy uint8 array,\n"
                       "or for a CUDA input a torch.uint8 tensor on its device (a view of the\n"
                       "encode_bound-sized allocation).\n") +
           kEncodeKwargsDoc)
              .c_str())
      .def(
          "encode_with_feedback",
          [](const codec_spec& s, const in_array& grad, const out_array& residual,
             std::uint64_t seed, std::uint64_t step, std::uint64_t tensor_id,
             const std::string& backend, std::optional<std::uint64_t> rows, int threads,
             nb::object out) {
            return encode_impl(s, grad, &residual,
                               {seed, step, tensor_id, backend, rows, threads, std::move(out)});
          },
          nb::arg("grad"), nb::arg("residual"), nb::kw_only(), nb::arg("seed") = 0,
          nb::arg("step") = 0, nb::arg("tensor_id") = 0, nb::arg("backend") = "auto",
          nb::arg("rows") = nb::none(), nb::arg("threads") = 0, nb::arg("out") = nb::none(),
          (std::string("Error-feedback encode: p = grad + residual; frame = encode(p);\n"
                       "residual = p - decode(frame), updated in place (any float dtype).\n") +
           kEncodeKwargsDoc)
              .c_str())
      .def(
          "decode",
          [](const codec_spec&, const in_array& frame, nb::handle out, nb::handle shape,
             nb::handle type, const std::string& backend,
             int threads) { return decode_impl(frame, out, shape, type, backend, threads); },
          nb::arg("frame"), nb::arg("out") = nb::none(), nb::kw_only(),
          nb::arg("shape") = nb::none(), nb::arg("dtype") = nb::none(), nb::arg("backend") = "auto",
          nb::arg("threads") = 0,
          "Same as gradcodec.decode (a frame describes itself; the codec is not checked).")
      .def(
          "decode_accumulate",
          [](const codec_spec&, const in_array& frame, const out_array& acc, float alpha,
             const std::string& backend,
             int threads) { decode_accumulate_impl(frame, acc, alpha, backend, threads); },
          nb::arg("frame"), nb::arg("acc"), nb::arg("alpha") = 1.0f, nb::kw_only(),
          nb::arg("backend") = "auto", nb::arg("threads") = 0,
          "Same as gradcodec.decode_accumulate.")
      .def(
          "peek", [](const codec_spec&, const in_array& frame) { return peek_impl(frame); },
          nb::arg("frame"), "Same as gradcodec.peek.")
      .def_static(
          "from_frame", [](const in_array& frame) { return spec_of(peek_impl(frame)); },
          nb::arg("frame"), "The spec a frame was encoded with, as far as its header records it.");

  nb::class_<frame_header>(m, "FrameInfo",
                           "A frame header, read by gradcodec.peek (docs/format.md).")
      .def_ro("version", &frame_header::version)
      .def_prop_ro("codec", [](const frame_header& h) { return std::string(codec_name(h.codec)); })
      .def_prop_ro("codec_id", [](const frame_header& h) { return static_cast<int>(h.codec); })
      .def_prop_ro("dtype", [](const frame_header& h) { return std::string(dtype_name(h.type)); })
      .def_ro("flags", &frame_header::flags)
      .def_prop_ro("nonfinite",
                   [](const frame_header& h) { return (h.flags & flag_nonfinite) != 0; })
      .def_prop_ro("index64", [](const frame_header& h) { return (h.flags & flag_index64) != 0; })
      .def_ro("n", &frame_header::n)
      .def_ro("payload_bytes", &frame_header::payload_bytes)
      .def_prop_ro("frame_bytes", &frame_header::frame_bytes)
      .def_ro("count", &frame_header::count)
      .def_ro("group", &frame_header::group)
      .def_ro("level", &frame_header::level)
      .def_ro("mode", &frame_header::mode)
      .def_ro("param", &frame_header::param)
      .def_prop_ro("spec", &spec_of, "The spec recorded by the header (as Codec.from_frame).")
      .def("as_dict", &header_dict, "The header fields as a dict.")
      .def("__repr__", [](const frame_header& h) {
        return nb::str("FrameInfo({})").format(nb::repr(header_dict(h)));
      });

  m.def(
      "encode",
      [](nb::handle spec, const in_array& input, std::uint64_t seed, std::uint64_t step,
         std::uint64_t tensor_id, const std::string& backend, std::optional<std::uint64_t> rows,
         int threads, nb::object out) {
        return encode_impl(spec_arg(spec), input, nullptr,
                           {seed, step, tensor_id, backend, rows, threads, std::move(out)});
      },
      nb::arg("spec"), nb::arg("input"), nb::kw_only(), nb::arg("seed") = 0, nb::arg("step") = 0,
      nb::arg("tensor_id") = 0, nb::arg("backend") = "auto", nb::arg("rows") = nb::none(),
      nb::arg("threads") = 0, nb::arg("out") = nb::none(),
      (std::string("encode(spec, input, ...): Codec(spec).encode(input, ...).\n") +
       kEncodeKwargsDoc)
          .c_str());
  m.def(
      "encode_with_feedback",
      [](nb::handle spec, const in_array& grad, const out_array& residual, std::uint64_t seed,
         std::uint64_t step, std::uint64_t tensor_id, const std::string& backend,
         std::optional<std::uint64_t> rows, int threads, nb::object out) {
        return encode_impl(spec_arg(spec), grad, &residual,
                           {seed, step, tensor_id, backend, rows, threads, std::move(out)});
      },
      nb::arg("spec"), nb::arg("grad"), nb::arg("residual"), nb::kw_only(), nb::arg("seed") = 0,
      nb::arg("step") = 0, nb::arg("tensor_id") = 0, nb::arg("backend") = "auto",
      nb::arg("rows") = nb::none(), nb::arg("threads") = 0, nb::arg("out") = nb::none(),
      (std::string("Error-feedback encode; residual (any float dtype) is updated in place.\n") +
       kEncodeKwargsDoc)
          .c_str());
  m.def(
      "encode_bound",
      [](nb::handle spec, std::uint64_t n, nb::handle type, std::uint64_t rows) {
        return encode_bound(spec_arg(spec), n, dtype_arg(type), rows);
      },
      nb::arg("spec"), nb::arg("n"), nb::arg("dtype") = "f32", nb::arg("rows") = 0,
      "The most bytes an encode of n elements can write, header included.");
  m.def("decode", &decode_impl, nb::arg("frame"), nb::arg("out") = nb::none(), nb::kw_only(),
        nb::arg("shape") = nb::none(), nb::arg("dtype") = nb::none(), nb::arg("backend") = "auto",
        nb::arg("threads") = 0,
        "Decodes a whole frame (exactly its frame_bytes long). With out (any writable\n"
        "float32/float16/bfloat16 array of n elements) the values are written there and out is\n"
        "returned; otherwise a new array of the given shape (default (n,)) and dtype (default:\n"
        "the frame's; float32 for bfloat16 frames) is returned: numpy for a host frame, a torch\n"
        "tensor on the frame's device for a CUDA frame (bfloat16 allowed there).");
  m.def("decode_accumulate", &decode_accumulate_impl, nb::arg("frame"), nb::arg("acc"),
        nb::arg("alpha") = 1.0f, nb::kw_only(), nb::arg("backend") = "auto", nb::arg("threads") = 0,
        "acc += alpha * decode(frame), in place, per element fma(alpha, v, acc) in f32.");
  m.def("peek", &peek_impl, nb::arg("frame"),
        "Reads and checks a frame's header (it may be followed by anything); returns FrameInfo.\n"
        "A CUDA frame's 48-byte header is copied to the host first (torch, current stream).");
  m.def("sign_majority_vote", &vote_impl, nb::arg("frames"), nb::arg("out") = nb::none(),
        nb::arg("alpha") = 1.0f, nb::kw_only(), nb::arg("shape") = nb::none(),
        nb::arg("dtype") = nb::none(),
        "signSGD majority vote of 'sign' frames: out = alpha * sign(sum of the frames' signs),\n"
        "0 on a tie, NaN for a bucket whose scale is NaN in any frame. Returns out (a new\n"
        "numpy array, float32 by default, when out is None).");
  m.def(
      "minifloat_codes",
      [](const std::string& fmt, const in_array& x, const std::string& rounding,
         nb::object uniforms) {
        const blocks::minifloat f = blocks::minifloat_of(unwrap(element_format_from_name(fmt)));
        const std::span<const float> v = f32_host_in(x, "x", "minifloat_codes reads host memory");
        const bool stochastic = rounding == "stochastic";
        if (!stochastic && rounding != "nearest")
          throw nb::value_error("rounding must be 'nearest' or 'stochastic'");
        std::span<const float> u;
        if (stochastic) {
          u = f32_host_in(nb::cast<in_array>(uniforms), "uniforms", "minifloat_codes");
          if (u.size() != v.size()) throw nb::value_error("one uniform per value");
        }
        std::string out(v.size() * 4, '\0');
        for (std::size_t i = 0; i < v.size(); ++i) {
          if (!blocks::is_finite(v[i]))
            throw nb::value_error("minifloat_codes takes finite values");
          const std::uint32_t c =
              blocks::element_code(f, v[i], stochastic, stochastic ? u[i] : 0.0f);
          std::memcpy(out.data() + 4 * i, &c, 4);
        }
        return nb::bytes(out.data(), out.size());
      },
      nb::arg("fmt"), nb::arg("x"), nb::arg("rounding") = "nearest",
      nb::arg("uniforms") = nb::none(),
      "The codes (u32 little-endian bytes) of finite float32 values in a block-scaled element\n"
      "format ('e4m3', 'e5m2', 'e3m2', 'e2m3', 'e2m1', 'int8'), saturating, rounded to\n"
      "nearest even or stochastically with the given uniforms in [0, 1) (docs/codecs.md).");
  m.def(
      "minifloat_values",
      [](const std::string& fmt, const in_array& codes) {
        const blocks::minifloat f = blocks::minifloat_of(unwrap(element_format_from_name(fmt)));
        const const_bytes b = bytes_in(codes, "codes", "minifloat_values reads u32 codes");
        if (b.size() % 4 != 0) throw nb::value_error("codes must be u32");
        std::string out(b.size(), '\0');
        for (std::size_t i = 0; i < b.size() / 4; ++i) {
          std::uint32_t c;
          std::memcpy(&c, b.data() + 4 * i, 4);
          const float x = blocks::element_value(f, c);
          std::memcpy(out.data() + 4 * i, &x, 4);
        }
        return nb::bytes(out.data(), out.size());
      },
      nb::arg("fmt"), nb::arg("codes"),
      "The float32 values (little-endian bytes) of u32 codes of an element format.");
  m.def(
      "codecs",
      []() {
        nb::list l;
        for (const codec_info& c : all_codecs()) l.append(info_dict(c));
        return l;
      },
      "Every codec with its summary, bits per element, bias and parameters.");
  m.def(
      "backend_unavailable_reason",
      [](const std::string& name) {
        return std::string(backend_unavailable_reason(backend_arg(name)));
      },
      nb::arg("name"), "Why a backend is not available ('' when it is).");
  m.def(
      "backend_available",
      [](const std::string& name) { return backend_available(backend_arg(name)); }, nb::arg("name"),
      "Whether a backend ('auto', 'reference', 'cpu', 'cuda') is usable here.");
  m.def(
      "backends",
      []() {
        std::vector<std::string> out;
        for (backend b : {backend::reference, backend::cpu, backend::cuda})
          if (backend_available(b)) out.emplace_back(backend_name(b));
        return out;
      },
      "The backends usable in this process.");
  m.def(
      "cpu_isa", []() { return std::string(cpu_isa_name(cpu_isa_active())); },
      "The instruction set the CPU backend uses now: 'scalar', 'avx2' or 'avx512'.");
  m.def(
      "cpu_isa_best", []() { return std::string(cpu_isa_name(cpu_isa_best())); },
      "The best instruction set this build and CPU support.");
  m.def(
      "cpu_isa_supported",
      [](const std::string& name) { return cpu_isa_supported(unwrap(cpu_isa_from_name(name))); },
      nb::arg("name"), "Whether this build and CPU can run an instruction set.");
  m.def(
      "set_cpu_isa",
      [](const std::string& name) { check(set_cpu_isa(unwrap(cpu_isa_from_name(name)))); },
      nb::arg("name"), "Selects the CPU backend's instruction set for the whole process.");
  m.def("cpu_default_threads", &cpu_default_threads,
        "Threads the CPU backend uses when a call passes threads=0.");
  m.def("set_cpu_default_threads", &set_cpu_default_threads, nb::arg("threads"),
        "Sets the CPU backend's default thread count (0: the hardware concurrency).");
}

}  // namespace gradcodec::python
