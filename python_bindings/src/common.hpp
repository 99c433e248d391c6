// SPDX-License-Identifier: Apache-2.0
//! @file
//! Shared pieces of the Python extension: turning library statuses into gradcodec.Error,
//! reading arrays (numpy, or anything with __dlpack__ such as torch tensors) as library
//! views without copying them, and host or device workspace. CUDA memory is reached only
//! through torch (allocations, streams, the device guard): no CUDA header is included.
#pragma once

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "gradcodec/gradcodec.hpp"

namespace gradcodec::python {

namespace nb = nanobind;

//! Any array, read-only, any dtype, shape and device (checked by the helpers below).
using in_array = nb::ndarray<nb::ro>;
//! Any writable array.
using out_array = nb::ndarray<>;

//! Raises gradcodec.Error(message, code).
[[noreturn]] void raise_status(const status& st);
[[noreturn]] void raise_error(status_code code, const std::string& message);

inline void check(const status& st) {
  if (!st.ok()) raise_status(st);
}

template <class T>
T unwrap(result<T> r) {
  if (!r.ok()) raise_status(r.error());
  return std::move(r.value());
}

//! The spec argument of a function: a Codec or a spec string.
codec_spec spec_arg(nb::handle spec);
//! "f32", "float32", numpy.float32, numpy.dtype("float16"), torch.bfloat16, ...
dtype dtype_arg(nb::handle type);
backend backend_arg(const std::string& name);

//! Which device the arrays of one call live on; every array of a call must agree.
struct call_device {
  int type = 0;  //!< 0 = no array seen yet, else a DLPack device type
  int id = 0;
  const char* first = nullptr;  //!< the array that set the device (for error messages)

  //! Records an array's device; CUDA memory needs the CUDA backend (and then selects it).
  void note(int device_type, int device_id, const char* what, exec_options& opt);
  [[nodiscard]] bool cuda() const { return type == nb::device::cuda::value; }
};

//! A gradient view of a read-only array (f32, f16 or bf16, C-contiguous). rows: the matrix
//! rows for codecs that need a shape; nullopt takes shape[0] of an array with 2+ dims.
const_tensor_view tensor_in(const in_array& a, const char* what, call_device& dev,
                            exec_options& opt, std::optional<std::uint64_t> rows = std::nullopt);
//! A gradient view of a writable array (decode output, accumulator, residual).
tensor_view tensor_out(const out_array& a, const char* what, call_device& dev, exec_options& opt);

//! A frame: a C-contiguous uint8/int8 array in host or CUDA memory (noted in `dev`), or any
//! object with the buffer protocol (bytes, bytearray, memoryview).
const_bytes frame_in(const in_array& a, const char* what, call_device& dev, exec_options& opt);
//! Bytes the host reads (PowerSGD states, the frames of the majority vote): host memory
//! only; `why` names what needs the host.
const_bytes bytes_in(const in_array& a, const char* what, const char* why);
//! A buffer to encode into: 1-D (the frame returned is out[:size]), uint8, host or CUDA.
mutable_bytes bytes_out(const out_array& a, const char* what, call_device& dev, exec_options& opt);

//! A frame's header, checked as peek() does. A CUDA frame's first 48 bytes are copied to
//! the host through torch (on torch's current stream of its device, which waits for them).
frame_header header_of(const_bytes frame, const call_device& dev);

//! f32 arrays of the PowerSGD phases (any shape, C-contiguous), in host or CUDA memory
//! (noted in `dev`, as every array of a codec call).
std::span<const float> f32_in(const in_array& a, const char* what, call_device& dev,
                              exec_options& opt);
std::span<float> f32_out(const out_array& a, const char* what, call_device& dev, exec_options& opt);
//! f32 host arrays (the PowerSGD state functions): `why` names what needs the host.
std::span<const float> f32_host_in(const in_array& a, const char* what, const char* why);
std::span<float> f32_host_out(const out_array& a, const char* what, const char* why);
//! Refuses an array outside host memory: "<what> is on cuda:N, but <why> (copy it ...)".
void require_host(int device_type, int device_id, const char* what, const char* why);

//! `import torch`, or gradcodec.Error(backend_unavailable) saying CUDA arrays need it.
nb::module_ torch_module();

//! For a CUDA call: makes the arrays' device current (torch.cuda.device) for the call and
//! runs it on torch's current stream of that device, so the library's kernels are ordered
//! with the caller's torch work and with torch's caching allocator. Nothing for host calls.
class device_scope {
 public:
  device_scope(const call_device& dev, exec_options& opt);
  ~device_scope();
  device_scope(const device_scope&) = delete;
  device_scope& operator=(const device_scope&) = delete;

 private:
  nb::object guard_;
};

//! Scratch for one call: a per-thread host buffer, or device memory from torch for CUDA.
class workspace {
 public:
  workspace(std::size_t size, const call_device& dev);
  [[nodiscard]] mutable_bytes bytes() const { return bytes_; }

 private:
  nb::object holder_;
  mutable_bytes bytes_{};
};

//! A new array on the call's device: numpy.empty for host calls, torch.empty (torch's
//! caching allocator, current stream) for CUDA. `type` is a torch/numpy dtype name.
nb::object new_array(const std::vector<std::size_t>& shape, const char* type,
                     const call_device& dev, void** data);

//! numpy.empty(shape, dtype) and its data pointer.
nb::object numpy_empty(const std::vector<std::size_t>& shape, const char* numpy_dtype, void** data);
//! "float32", "float16", "bfloat16" (torch's names; numpy has no bfloat16).
const char* dtype_full_name(dtype t);

void register_codec(nb::module_& m);
void register_powersgd(nb::module_& m);
void register_expected(nb::module_& m);
void register_outer(nb::module_& m);
void register_communicator(nb::module_& m);
void register_plan(nb::module_& m);

}  // namespace gradcodec::python
