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

template <class Array>
void require_host(const Array& a, const char* what) {
  if (a.device_type() != nb::device::cpu::value)
    raise_error(status_code::invalid_argument, std::string(what).append(" must be in host memory"));
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
                  std::string(what).append(
                      " is CUDA memory, but the CUDA backend is not available in this build "
                      "(copy the tensor to the CPU first)"));
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
  } else if (type != device_type || id != device_id) {
    raise_error(status_code::invalid_argument,
                std::string(what).append(" is on another device than the other arrays"));
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

const_bytes bytes_in(const in_array& a, const char* what) {
  if (!is_byte_type(a.dtype()))
    throw nb::type_error(type_error_text(what, "uint8 bytes (numpy uint8, bytes, ...)").c_str());
  require_contiguous(a, what);
  require_host(a, what);
  return {static_cast<const std::byte*>(a.data()), a.size()};
}

mutable_bytes bytes_out(const out_array& a, const char* what) {
  if (!is_byte_type(a.dtype()) || a.ndim() != 1)
    throw nb::type_error(type_error_text(what, "a 1-D uint8 array").c_str());
  require_contiguous(a, what);
  require_host(a, what);
  return {static_cast<std::byte*>(a.data()), a.size()};
}

std::span<const float> f32_in(const in_array& a, const char* what) {
  if (dtype_of(a.dtype()) != dtype::f32)
    throw nb::type_error(type_error_text(what, "float32").c_str());
  require_contiguous(a, what);
  require_host(a, what);
  return {static_cast<const float*>(a.data()), a.size()};
}

std::span<float> f32_out(const out_array& a, const char* what) {
  if (dtype_of(a.dtype()) != dtype::f32)
    throw nb::type_error(type_error_text(what, "float32").c_str());
  require_contiguous(a, what);
  require_host(a, what);
  return {static_cast<float*>(a.data()), a.size()};
}

workspace::workspace(std::size_t size, const call_device& dev) {
  if (size == 0) return;
  if (dev.cuda()) {
    // Device scratch comes from torch's caching allocator (the only way CUDA memory can
    // reach this module), on the tensors' device.
    nb::module_ torch = nb::module_::import_("torch");
    nb::object device = torch.attr("device")("cuda", dev.id);
    holder_ = torch.attr("empty")(size, nb::arg("dtype") = torch.attr("uint8"),
                                  nb::arg("device") = device);
    const auto ptr = nb::cast<std::uintptr_t>(holder_.attr("data_ptr")());
    bytes_ = {reinterpret_cast<std::byte*>(ptr), size};
    return;
  }
  // Grow-only per-thread buffer: no allocation once the largest call has been seen.
  thread_local std::vector<std::byte> host;
  if (host.size() < size) host.resize(size);
  bytes_ = {host.data(), size};
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

const char* numpy_dtype_name(dtype t) {
  switch (t) {
    case dtype::f32: return "float32";
    case dtype::f16: return "float16";
    case dtype::bf16: break;
  }
  return nullptr;  // numpy has no bfloat16
}

}  // namespace gradcodec::python
