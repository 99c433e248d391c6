// SPDX-License-Identifier: Apache-2.0
//! @file
//! The internal contract between the front end (src/codec.cpp) and each backend
//! (reference/, cpu/, kernels/). The front end validates specs, views and frame headers;
//! a backend's codec functions may rely on that and only check the payload itself.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string_view>
#include <utility>

#include "gradcodec/codec.hpp"
#include "gradcodec/expected_decode.hpp"
#include "gradcodec/frame.hpp"
#include "gradcodec/powersgd.hpp"

namespace gradcodec::detail {

//! One encode. The codec writes the payload at `payload` (exactly the size it reports, at
//! most `capacity`, zero padding included) and fills hdr's codec fields (count, group,
//! level, mode, param, flags, payload_bytes). `in` holds values to encode (f32, f16 or
//! bf16); sparse and cast codecs store values in `wire` on the wire.
struct encode_call {
  const codec_spec& spec;
  const context& ctx;
  const_tensor_view in;
  dtype wire;
  std::byte* payload;
  std::uint64_t capacity;
  mutable_bytes workspace;
  frame_header& hdr;
  int threads;
  void* stream;
};

//! One decode of a frame whose header already passed peek() and whose payload size
//! matched. `out` has hdr.n elements. accumulate: out = fma(alpha, v, out) per element.
//!
//! Device backends only, from decode_expected: a non-null `verdict` means the header was
//! not read on the host. `hdr` is then the expected header (its count and payload size are
//! not the frame's for threshold and dgc: a kernel reads verdict->count), the backend's
//! header check has been launched before, and the decode kernels write nothing unless
//! verdict->code is ok; `frame_bytes` is the frame's length.
struct decode_call {
  const frame_header& hdr;
  const std::byte* payload;
  tensor_view out;
  float alpha;
  bool accumulate;
  mutable_bytes workspace;
  int threads;
  void* stream;
  frame_verdict* verdict = nullptr;
  std::uint64_t frame_bytes = 0;
};

//! A fused error-feedback encode: in = grad, residual updated in place; same contract as
//! encode_call otherwise (wire = grad dtype).
struct feedback_call {
  encode_call enc;
  tensor_view residual;
};

//! One codec on one backend. A null encode_feedback means "use the generic composition"
//! (p = g + e, encode(p), decode, e = p - d) built from encode and decode.
struct codec_ops {
  std::size_t (*workspace)(const codec_spec&, const_tensor_view shape, operation op) = nullptr;
  status (*encode)(const encode_call&) = nullptr;
  status (*decode)(const decode_call&) = nullptr;
  status (*encode_feedback)(const feedback_call&) = nullptr;
};

//! How the front end reaches a backend whose buffers live in device memory. Such a
//! backend's encode writes the whole frame, header included (at payload - header_bytes),
//! and implements encode_feedback for every codec it offers; the front end never touches
//! its buffers on the host.
struct device_access {
  //! Whether `p` points to memory this backend works on (for backend::automatic).
  bool (*owns)(const void* p) noexcept;
  //! The device that holds `p` when it is device-only memory, which the host cannot
  //! dereference, else -1 (host memory, and managed memory, which the host and every device
  //! reach).
  int (*device_of)(const void* p) noexcept;
  //! The calling thread's current device, where the backend launches (-1 if unknown).
  int (*current_device)() noexcept;
  //! Reads and checks a frame's header (gradcodec::peek on a copy of its first bytes).
  result<frame_header> (*read_header)(const_bytes frame, void* stream) noexcept;
  //! Launches blocks::check_expected_header on the frame, writing *verdict (device memory),
  //! stream-ordered, without waiting.
  status (*check_header)(const frame_header& expected, const_bytes frame, frame_verdict* verdict,
                         void* stream) noexcept;
};

//! The PowerSGD phase API (include/gradcodec/powersgd.hpp) on a device backend, stream-
//! ordered on `stream`: the operations of detail::powersgd_kernels (contract/powersgd_kernels.hpp)
//! on device memory, after the front end checked every argument. Equal bits to the host
//! kernels except the bit patterns of NaNs.
struct device_powersgd_phases {
  //! q = init_q(rng) (cols x r entries), then orth(q, cols, r, eps).
  status (*init_q)(std::uint64_t seed, std::uint64_t tensor_id, std::uint64_t cols, std::uint32_t r,
                   float eps, float* q, void* stream);
  //! residual[k] = residual[k] + grad[k]; p = M q.
  status (*compute_p)(const_tensor_view grad, float* residual, const float* q, float* p,
                      std::uint64_t rows, std::uint64_t cols, std::uint32_t r, void* stream);
  //! q = M^T p (p already orthonormal).
  status (*project_q)(const float* p, const float* m, std::uint64_t rows, std::uint64_t cols,
                      std::uint32_t r, float* q, void* stream);
  //! q = q / world; out = p q^T; residual = ef ? residual - out : +0.0.
  status (*finish)(const float* p, float* q, std::uint64_t rows, std::uint64_t cols,
                   std::uint32_t r, int world, bool ef, float* residual, tensor_view out,
                   void* stream);
  //! orth(a, rows, r, eps) in place.
  status (*orthogonalize)(float* a, std::uint64_t rows, std::uint32_t r, float eps, void* stream);
  //! orth of each of `count` matrices (none empty, none overlapping).
  status (*orthogonalize_batch)(const powersgd_matrix* batch, std::size_t count, float eps,
                                void* stream);
};

struct powersgd_kernels;  // contract/powersgd_kernels.hpp
struct vote_kernels;      // contract/vote_kernels.hpp

//! A backend: one codec_ops per codec id (index = id - 1); a null encode means the codec
//! is not implemented there and the front end reports backend_unavailable. A host backend
//! also carries the kernels of the PowerSGD phase API and of the majority vote, so every
//! call, codec or not, reaches the backend through this one table, chosen by one rule.
struct backend_table {
  const char* name;
  codec_ops codecs[codec_count];
  const device_access* device = nullptr;                    //!< null: host memory
  const device_powersgd_phases* powersgd_phases = nullptr;  //!< device backends only
  const powersgd_kernels* powersgd = nullptr;               //!< host backends only
  const vote_kernels* vote = nullptr;                       //!< host backends only
};

//! The buffers of one call, named for messages.
using named_buffers = std::initializer_list<std::pair<const void*, const char*>>;

//! Where a call's buffers must live. On a device backend (`on_device`) each must be memory
//! that backend works on, and device-only memory must be on the current device (launches
//! go there; another device's memory would fault); on a host backend none may be
//! device-only memory (host code would fault on it; the automatic choice looks at one
//! pointer only). `who` starts the message, e.g. "powersgd".
status check_buffer_memory(bool on_device, named_buffers buffers, std::string_view who);
//! The same against a given device backend's memory services (null: no device backend).
status check_buffer_memory(const device_access* device, bool on_device, named_buffers buffers,
                           std::string_view who);

const backend_table& reference_backend() noexcept;
//! Null when the backend is not built (or, for CUDA, no device is present).
const backend_table* cpu_backend() noexcept;
const backend_table* cuda_backend() noexcept;
//! Why cuda_backend() is null ("" when it is not).
std::string_view cuda_unavailable_reason() noexcept;

}  // namespace gradcodec::detail
