// SPDX-License-Identifier: Apache-2.0
//! @file
//! The codec API: bound, encode into a caller-owned buffer, decode, decode-accumulate,
//! peek, and the fused error-feedback encode. Modelled on zstd (bound then encode) and CUB
//! (workspace by query): nothing here allocates, throws, or synchronizes a device.
#pragma once

#include <cstddef>
#include <cstdint>

#include "gradcodec/context.hpp"
#include "gradcodec/frame.hpp"
#include "gradcodec/spec.hpp"
#include "gradcodec/status.hpp"
#include "gradcodec/views.hpp"

namespace gradcodec {

//! Where the work runs. `automatic` picks CUDA for device memory, else the fastest CPU
//! backend built in. Every backend produces identical bytes and values.
enum class backend : std::uint8_t { automatic = 0, reference = 1, cpu = 2, cuda = 3 };

std::string_view backend_name(backend b) noexcept;
result<backend> backend_from_name(std::string_view name);
//! Whether a backend is built in and usable on this machine (CUDA: a device is present).
bool backend_available(backend b) noexcept;
//! Why a backend is not available ("" when it is): not built, or for CUDA what the runtime
//! said, e.g. "the CUDA runtime refused: cudaErrorInsufficientDriver (CUDA driver version
//! is insufficient for CUDA runtime version)" or "no CUDA device visible
//! (cudaErrorNoDevice: ...)".
std::string_view backend_unavailable_reason(backend b) noexcept;

//! How a call runs. Defaults suit host memory and no scratch.
struct exec_options {
  backend where = backend::automatic;
  mutable_bytes workspace{};  //!< scratch of at least workspace_size() bytes
  void* stream = nullptr;     //!< cudaStream_t for the CUDA backend (nullptr: default stream)
  int threads = 0;            //!< CPU backend threads; 0 = library default
};

enum class operation : std::uint8_t { encode, encode_with_feedback, decode, decode_accumulate };

//! The most bytes encode() can write for n elements (header included). Exact for every
//! codec but threshold (whose count depends on the data) and PowerSGD without `rows`.
std::uint64_t encode_bound(const codec_spec& spec, std::uint64_t n, dtype type = dtype::f32,
                           std::uint64_t rows = 0) noexcept;

//! Scratch bytes an operation needs for a tensor of this shape (`shape.data` is not read).
//! For decode operations pass the frame's spec from peek() (or the encoder's spec).
result<std::size_t> workspace_size(const codec_spec& spec, const_tensor_view shape, operation op,
                                   const exec_options& opt = {}) noexcept;

//! Encodes `input` into `out` (header + payload). Returns the bytes written. On error
//! nothing in `out` is meaningful and nothing past out.size() was touched.
result<std::size_t> encode(const codec_spec& spec, const context& ctx, const_tensor_view input,
                           mutable_bytes out, const exec_options& opt = {}) noexcept;

namespace detail {
struct codec_ops;
struct prepared_access;
}  // namespace detail

//! An encode (or error-feedback encode) prepared once for inputs of one shape: the spec
//! validated, the backend chosen (under backend::automatic, for the memory `shape.data`
//! points into), the workspace size known. Calls with it check only what depends on the
//! buffers, so a caller that asks for the workspace and then encodes, call after call,
//! validates and chooses once. Holds no buffer; copy it freely.
class prepared_encode {
 public:
  [[nodiscard]] const codec_spec& spec() const noexcept { return spec_; }
  [[nodiscard]] operation op() const noexcept { return op_; }
  //! Scratch bytes every call with it needs (exec_options::workspace).
  [[nodiscard]] std::size_t workspace_bytes() const noexcept { return workspace_; }
  //! The backend chosen (never automatic).
  [[nodiscard]] backend where() const noexcept { return where_; }

 private:
  friend struct detail::prepared_access;
  codec_spec spec_{};
  operation op_ = operation::encode;
  backend where_ = backend::reference;
  std::uint64_t n_ = 0, rows_ = 0;
  dtype type_ = dtype::f32;
  std::size_t workspace_ = 0;
  const detail::codec_ops* ops_ = nullptr;
  bool device_ = false;
};

//! Prepares `op` (encode or encode_with_feedback) for inputs of `shape`'s length, dtype and
//! rows; `shape.data`, if given, is only used to tell device from host memory. The errors of
//! workspace_size() for the same arguments.
result<prepared_encode> prepare_encode(const codec_spec& spec, const_tensor_view shape,
                                       operation op, const exec_options& opt = {}) noexcept;

//! encode() with a prepared call: `input` must have the prepared length, dtype and rows
//! (shape_mismatch otherwise) and p.op() must be encode; opt.where is not consulted.
result<std::size_t> encode(const prepared_encode& p, const context& ctx, const_tensor_view input,
                           mutable_bytes out, const exec_options& opt = {}) noexcept;

//! Decodes a whole frame (exactly frame_bytes() long) into `out` (n elements, any dtype).
//! Every length, count and index is checked before anything is written.
status decode(const_bytes frame, tensor_view out, const exec_options& opt = {}) noexcept;

//! acc += alpha * decode(frame), evaluated per element as fma(alpha, v, acc) in f32,
//! without a dense temporary.
status decode_accumulate(const_bytes frame, tensor_view acc, float alpha,
                         const exec_options& opt = {}) noexcept;

//! Error feedback fused into the encode: p = grad + residual (f32 adds), encodes p with the
//! grad's dtype on the wire, then residual = p - decode(frame). Returns the bytes written.
result<std::size_t> encode_with_feedback(const codec_spec& spec, const context& ctx,
                                         const_tensor_view grad, tensor_view residual,
                                         mutable_bytes out, const exec_options& opt = {}) noexcept;
//! encode_with_feedback() with a prepared call (p.op() must be encode_with_feedback).
result<std::size_t> encode_with_feedback(const prepared_encode& p, const context& ctx,
                                         const_tensor_view grad, tensor_view residual,
                                         mutable_bytes out, const exec_options& opt = {}) noexcept;

//! The spec a frame was encoded with (for workspace queries on the decode side).
codec_spec spec_of(const frame_header& h) noexcept;

}  // namespace gradcodec
