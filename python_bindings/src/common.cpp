// SPDX-License-Identifier: Apache-2.0
//! @file
//! Errors, argument conversion and array views for the Python extension.
#include "common.hpp"

#include <cstring>
#include <string_view>

namespace gradcodec::python {
namespace {

namespace dl = nb::dlpack;

//! gradcodec._errors.Error, looked up on first use (the package imports the extension
//! before it defines the exception class). Leaked on purpose: it lives as long as Python.
PyObject* error_type() {
  static PyObject* type =
      nb::object(nb::module_::import_("gradcodec._errors").attr("Error")).release().ptr();
  return type;
}

std::optional<dtype> dtype_of(dl::dtype t) {
  if (t.lanes != 1) return std::nullopt;
  if (t.code == static_cast<std::uint8_t>(dl::dtype_code::Float) && t.bits == 32) return dtype::f32;
  if (t.code == static_cast<std::uint8_t>(dl::dtype_code::Float) && t.bits == 16) return dtype::f16;
  if (t.code == static_cast<std::uint8_t>(dl::dtype_code::Bfloat) && t.bits == 16)
    return dtype::bf16;
  return std::nullopt;
}

bool is_byte_type(dl::dtype t) {
  return t.lanes == 1 && t.bits == 8 &&
         (t.code == static_cast<std::uint8_t>(dl::dtype_code::UInt) ||
          t.code == static_cast<std::uint8_t>(dl::dtype_code::Int));
}

//! Strides are in elements; size-1 dimensions may have any stride.
template <class Array>
bool c_contiguous(const Array& a) {
  if (a.size() <= 1) return true;
  std::int64_t expect = 1;
  for (std::size_t i = a.ndim(); i-- > 0;) {
    if (a.shape(i) != 1 && a.stride(i) != expect) return false;
    expect *= static_cast<std::int64_t>(a.shape(i));
  }
  return true;
}

std::string type_error_text(const char* what, const char* want) {
  return std::string(what).append(" must be ").append(want);
}

template <class Array>
void require_contiguous(const Array& a, const char* what) {
  if (!c_contiguous(a))
    raise_error(status_code::invalid_argument,
                std::string(what).append(" must be C-contiguous (no copies are made: use "
                                         "numpy.ascontiguousarray or tensor.contiguous())"));
}

//! "in host memory" or "on cuda:N": where an array lives, for messages.
std::string where_text(int device_type, int device_id) {
  if (device_type == nb::device::cpu::value) return "in host memory";
  if (device_type == nb::device::cuda::value) return "on cuda:" + std::to_string(device_id);
  return "on DLPack device type " + std::to_string(device_type);
}

template <class Array>
dtype float_type(const Array& a, const char* what) {
  auto t = dtype_of(a.dtype());
  if (!t)
    throw nb::type_error(
        type_error_text(what, "float32, float16 or bfloat16 (convert it first: no implicit copies)")
            .c_str());
  return *t;
}

template <class Array>
std::uint64_t rows_of(const Array& a) {
  return a.ndim() >= 2 ? static_cast<std::uint64_t>(a.shape(0)) : 0;
}

}  // namespace

void raise_error(status_code code, const std::string& message) {
  nb::object exc = nb::handle(error_type())(nb::str(message.c_str()), nb::cast(code));
  PyErr_SetObject(error_type(), exc.ptr());
  throw nb::python_error();
}

void raise_status(const status& st) { raise_error(st.code(), st.message()); }

codec_spec spec_arg(nb::handle spec) {
  codec_spec out;
  if (nb::try_cast<codec_spec>(spec, out)) return out;
  if (nb::isinstance<nb::str>(spec)) return unwrap(parse_spec(nb::cast<std::string>(spec)));
  throw nb::type_error("spec must be a gradcodec.Codec or a spec string such as 'topk:ratio=0.01'");
}

dtype dtype_arg(nb::handle type) {
  std::string s;
  if (nb::isinstance<nb::str>(type)) {
    s = nb::cast<std::string>(type);
  } else if (nb::hasattr(type, "__name__") && !nb::hasattr(type, "is_floating_point")) {
    s = nb::cast<std::string>(type.attr("__name__"));  // numpy.float32
  } else {
    s = nb::cast<std::string>(nb::str(type));  // numpy.dtype('float32'), torch.float32
  }
  if (s.rfind("torch.", 0) == 0) s = s.substr(6);
  if (s == "f32" || s == "float32") return dtype::f32;
  if (s == "f16" || s == "float16" || s == "half") return dtype::f16;
  if (s == "bf16" || s == "bfloat16") return dtype::bf16;
  throw nb::value_error(
      std::string("unknown dtype '").append(s).append("' (f32, f16 or bf16)").c_str());
}

backend backend_arg(const std::string& name) { return unwrap(backend_from_name(name)); }

void call_device::note(int device_type, int device_id, const char* what, exec_options& opt) {
  if (device_type != nb::device::cpu::value && device_type != nb::device::cuda::value)
    raise_error(status_code::invalid_argument,
                std::string(what).append(" lives on a device gradcodec does not support"));
  if (device_type == nb::device::cuda::value) {
    if (!backend_available(backend::cuda))
      raise_error(status_code::backend_unavailable,
                  std::string(what)
                      .append(" is CUDA memory, but the CUDA backend is not available (")
                      .append(backend_unavailable_reason(backend::cuda))
                      .append("): copy the tensor to the CPU first"));
    if (opt.where == backend::automatic) opt.where = backend::cuda;
    if (opt.where != backend::cuda)
      raise_error(status_code::invalid_argument, std::string(what)
                                                     .append(" is CUDA memory but backend '")
                                                     .append(backend_name(opt.where))
                                                     .append("' runs on the host"));
  }
  if (type == 0) {
    type = device_type;
    id = device_id;
    first = what;
  } else if (type != device_type || id != device_id) {
    // The library would refuse the call too, but only after a host backend had touched
    // device memory (or the reverse): every array of a call lives on one device.
    raise_error(status_code::invalid_argument,
                std::string(what)
                    .append(" is ")
                    .append(where_text(device_type, device_id))
                    .append(" but ")
                    .append(first)
                    .append(" is ")
                    .append(where_text(type, id))
                    .append(": every array of one call must be on the same device (gradcodec "
                            "copies nothing; move it with .to(...))"));
  }
}

const_tensor_view tensor_in(const in_array& a, const char* what, call_device& dev,
                            exec_options& opt, std::optional<std::uint64_t> rows) {
  const dtype t = float_type(a, what);
  require_contiguous(a, what);
  dev.note(a.device_type(), a.device_id(), what, opt);
  return {a.data(), static_cast<std::uint64_t>(a.size()), t, rows ? *rows : rows_of(a)};
}

tensor_view tensor_out(const out_array& a, const char* what, call_device& dev, exec_options& opt) {
  const dtype t = float_type(a, what);
  require_contiguous(a, what);
  dev.note(a.device_type(), a.device_id(), what, opt);
  return {a.data(), static_cast<std::uint64_t>(a.size()), t, 0};
}

const_bytes frame_in(const in_array& a, const char* what, call_device& dev, exec_options& opt) {
  if (!is_byte_type(a.dtype()))
    throw nb::type_error(type_error_text(what, "uint8 bytes (numpy uint8, bytes, ...)").c_str());
  require_contiguous(a, what);
  dev.note(a.device_type(), a.device_id(), what, opt);
  return {static_cast<const std::byte*>(a.data()), a.size()};
}

const_bytes bytes_in(const in_array& a, const char* what, const char* why) {
  if (!is_byte_type(a.dtype()))
    throw nb::type_error(type_error_text(what, "uint8 bytes (numpy uint8, bytes, ...)").c_str());
  require_contiguous(a, what);
  require_host(a.device_type(), a.device_id(), what, why);
  return {static_cast<const std::byte*>(a.data()), a.size()};
}

mutable_bytes bytes_out(const out_array& a, const char* what, call_device& dev, exec_options& opt) {
  if (!is_byte_type(a.dtype()) || a.ndim() != 1)
    throw nb::type_error(type_error_text(what, "a 1-D uint8 array").c_str());
  require_contiguous(a, what);
  dev.note(a.device_type(), a.device_id(), what, opt);
  return {static_cast<std::byte*>(a.data()), a.size()};
}

frame_header header_of(const_bytes frame, const call_device& dev) {
  if (!dev.cuda() || frame.size() == 0) return unwrap(peek(frame));
  // The header is on the device: a non-owning torch view of its first bytes, copied to
  // the host by .cpu() (a small synchronous copy on torch's current stream, so it waits
  // for the work that wrote the frame). The library reads it again when it decodes.
  const std::size_t len = frame.size() < header_bytes ? frame.size() : header_bytes;
  torch_module();
  const nb::ndarray<nb::pytorch, std::uint8_t, nb::ndim<1>> head(
      const_cast<std::byte*>(frame.data()), {len}, nb::handle(), {}, nb::dtype<std::uint8_t>(),
      nb::device::cuda::value, dev.id);
  const nb::object host = nb::cast(head, nb::rv_policy::reference).attr("cpu")();
  const auto bytes = nb::cast<in_array>(host);
  return unwrap(peek({static_cast<const std::byte*>(bytes.data()), len}));
}

void require_host(int device_type, int device_id, const char* what, const char* why) {
  if (device_type == nb::device::cpu::value) return;
  raise_error(status_code::invalid_argument, std::string(what)
                                                 .append(" is ")
                                                 .append(where_text(device_type, device_id))
                                                 .append(", but ")
                                                 .append(why)
                                                 .append(" (copy it with .cpu() first)"));
}

namespace {

template <class Array>
void require_f32(const Array& a, const char* what) {
  if (dtype_of(a.dtype()) != dtype::f32)
    throw nb::type_error(type_error_text(what, "float32").c_str());
  require_contiguous(a, what);
}

}  // namespace

std::span<const float> f32_in(const in_array& a, const char* what, call_device& dev,
                              exec_options& opt) {
  require_f32(a, what);
  dev.note(a.device_type(), a.device_id(), what, opt);
  return {static_cast<const float*>(a.data()), a.size()};
}

std::span<float> f32_out(const out_array& a, const char* what, call_device& dev,
                         exec_options& opt) {
  require_f32(a, what);
  dev.note(a.device_type(), a.device_id(), what, opt);
  return {static_cast<float*>(a.data()), a.size()};
}

std::span<const float> f32_host_in(const in_array& a, const char* what, const char* why) {
  require_f32(a, what);
  require_host(a.device_type(), a.device_id(), what, why);
  return {static_cast<const float*>(a.data()), a.size()};
}

std::span<float> f32_host_out(const out_array& a, const char* what, const char* why) {
  require_f32(a, what);
  require_host(a.device_type(), a.device_id(), what, why);
  return {static_cast<float*>(a.data()), a.size()};
}

nb::module_ torch_module() {
  try {
    return nb::module_::import_("torch");
  } catch (nb::python_error& e) {
    if (!e.matches(PyExc_ImportError)) throw;
    raise_error(status_code::backend_unavailable,
                "CUDA arrays need PyTorch: gradcodec allocates device memory and finds the "
                "current CUDA stream through torch, which cannot be imported here");
  }
}

device_scope::device_scope(const call_device& dev, exec_options& opt) {
  if (!dev.cuda()) return;
  const nb::object cuda = torch_module().attr("cuda");
  // The caller's current stream: the kernels run after the torch work that produced the
  // inputs, and torch's allocator (workspace, frames) reuses memory in that stream's order.
  // 0 is the legacy default stream, which is the library's nullptr too.
  const auto stream =
      nb::cast<std::uintptr_t>(cuda.attr("current_stream")(dev.id).attr("cuda_stream"));
  // Launches go to the current device: make it the arrays' one. Entered last, so nothing
  // can throw between entering and the destructor's exit.
  nb::object guard = cuda.attr("device")(dev.id);
  guard.attr("__enter__")();
  guard_ = std::move(guard);
  opt.stream = reinterpret_cast<void*>(stream);
}

device_scope::~device_scope() {
  if (!guard_.is_valid()) return;
  try {
    guard_.attr("__exit__")(nb::none(), nb::none(), nb::none());
  } catch (...) {  // NOLINT(bugprone-empty-catch): a destructor must not throw
  }
}

workspace::workspace(std::size_t size, const call_device& dev) {
  if (size == 0) return;
  if (dev.cuda()) {
    // Device scratch comes from torch's caching allocator (the only way CUDA memory can
    // reach this module), on the arrays' device and its current stream.
    void* data = nullptr;
    holder_ = new_array({size}, "uint8", dev, &data);
    bytes_ = {static_cast<std::byte*>(data), size};
    return;
  }
  // Grow-only per-thread buffer: no allocation once the largest call has been seen.
  thread_local std::vector<std::byte> host;
  if (host.size() < size) host.resize(size);
  bytes_ = {host.data(), size};
}

nb::object new_array(const std::vector<std::size_t>& shape, const char* type,
                     const call_device& dev, void** data) {
  if (!dev.cuda()) return numpy_empty(shape, type, data);
  nb::module_ torch = torch_module();
  nb::list dims;
  for (std::size_t d : shape) dims.append(d);
  nb::object arr = torch.attr("empty")(nb::tuple(dims), nb::arg("dtype") = torch.attr(type),
                                       nb::arg("device") = torch.attr("device")("cuda", dev.id));
  *data = reinterpret_cast<void*>(nb::cast<std::uintptr_t>(arr.attr("data_ptr")()));
  return arr;
}

nb::object numpy_empty(const std::vector<std::size_t>& shape, const char* numpy_dtype,
                       void** data) {
  nb::list dims;
  for (std::size_t d : shape) dims.append(d);
  nb::object arr =
      nb::module_::import_("numpy").attr("empty")(nb::tuple(dims), nb::str(numpy_dtype));
  *data = nb::cast<out_array>(arr).data();
  return arr;
}

const char* dtype_full_name(dtype t) {
  switch (t) {
    case dtype::f32: return "float32";
    case dtype::f16: return "float16";
    case dtype::bf16: break;
  }
  return "bfloat16";
}

}  // namespace gradcodec::python
