// SPDX-License-Identifier: Apache-2.0
//! @file
//! The CUDA backend table: which codecs run on the GPU, how the front end recognises
//! device memory, and how it reads a frame header that lives on the device.
#include <cstring>
#include <string>
#include <string_view>

#include "codecs.hpp"
#include "common.cuh"
#include "gradcodec/blocks/codec_traits.hpp"

namespace gradcodec::detail {

namespace {

//! "" when a device is usable, else what the runtime said: a driver older than the
//! runtime, or a fabric manager not ready, must not read as "no GPU".
std::string device_problem() {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e == cudaSuccess && count > 0) return {};
  (void)cudaGetLastError();
  if (e == cudaSuccess) return "no CUDA device visible (the runtime counts 0 devices)";
  const std::string what =
      std::string(cudaGetErrorName(e)).append(": ").append(cudaGetErrorString(e));
  if (e == cudaErrorNoDevice) return "no CUDA device visible (" + what + ")";
  return "the CUDA runtime refused: " + what;
}

const std::string& problem() {
  static const std::string p = device_problem();
  return p;
}

//! CUDA's attributes of p (unregistered host memory for anything CUDA does not know).
cudaPointerAttributes attributes_of(const void* p) noexcept {
  cudaPointerAttributes a{};
  a.type = cudaMemoryTypeUnregistered;
  if (p != nullptr && cudaPointerGetAttributes(&a, p) != cudaSuccess) {
    (void)cudaGetLastError();  // not a CUDA pointer: clear the sticky-free error state
    a.type = cudaMemoryTypeUnregistered;
  }
  return a;
}

bool owns(const void* p) noexcept {
  const cudaMemoryType t = attributes_of(p).type;
  return t == cudaMemoryTypeDevice || t == cudaMemoryTypeManaged;
}

int device_of(const void* p) noexcept {
  const cudaPointerAttributes a = attributes_of(p);
  return a.type == cudaMemoryTypeDevice ? a.device : -1;
}

int current_device() noexcept {
  int d = -1;
  if (cudaGetDevice(&d) != cudaSuccess) {
    (void)cudaGetLastError();
    return -1;
  }
  return d;
}

//! One small device-to-host copy and a wait on the caller's stream: the front end checks
//! the header on the host before it launches anything.
result<frame_header> read_header(const_bytes frame, void* stream) noexcept {
  static_assert(header_bytes <= cuda::host_read_max);
  std::byte host[header_bytes];
  const std::size_t len = frame.size() < header_bytes ? frame.size() : header_bytes;
  if (auto st = cuda::read_to_host(host, frame.data(), len, stream, "reading the frame header");
      !st.ok())
    return st;
  return peek({host, len});
}

status check_header(const frame_header& expected, const_bytes frame, frame_verdict* verdict,
                    void* stream) noexcept {
  return cuda::check_header(expected, frame.data(), frame.size(), verdict, stream);
}

const device_access access{owns, device_of, current_device, read_header, check_header};

constexpr codec_ops quant{cuda::quant_workspace, cuda::quant_encode, cuda::quant_decode,
                          cuda::quant_encode_feedback};
constexpr codec_ops sign{cuda::sign_workspace, cuda::sign_encode, cuda::sign_decode,
                         cuda::sign_encode_feedback};
constexpr codec_ops randomk{cuda::randomk_workspace, cuda::randomk_encode, cuda::randomk_decode,
                            cuda::randomk_encode_feedback};
constexpr codec_ops topk{cuda::topk_workspace, cuda::topk_encode, cuda::topk_decode,
                         cuda::topk_encode_feedback};
constexpr codec_ops threshold{cuda::threshold_workspace, cuda::threshold_encode,
                              cuda::threshold_decode, cuda::threshold_encode_feedback};
constexpr codec_ops dgc{cuda::dgc_workspace, cuda::dgc_encode, cuda::dgc_decode,
                        cuda::dgc_encode_feedback};
constexpr codec_ops powersgd{cuda::powersgd_workspace, cuda::powersgd_encode, cuda::powersgd_decode,
                             cuda::powersgd_encode_feedback};
constexpr codec_ops cast{cuda::cast_workspace, cuda::cast_encode, cuda::cast_decode,
                         cuda::cast_encode_feedback};
constexpr codec_ops block_scaled{cuda::block_scaled_workspace, cuda::block_scaled_encode,
                                 cuda::block_scaled_decode, cuda::block_scaled_encode_feedback};

backend_table make_table() {
  backend_table t{"cuda", {}, &access, &cuda::powersgd_phases};
  auto set = [&](codec_id id, codec_ops ops) { t.codecs[static_cast<int>(id) - 1] = ops; };
  for (const codec_info& c : all_codecs())
    if (blocks::traits_of(c.id).block_scaled) set(c.id, block_scaled);
  set(codec_id::qsgd, quant);
  set(codec_id::terngrad, quant);
  set(codec_id::minmax, quant);
  set(codec_id::sign, sign);
  set(codec_id::onebit, sign);
  set(codec_id::randomk, randomk);
  set(codec_id::topk, topk);
  set(codec_id::threshold, threshold);
  set(codec_id::dgc, dgc);
  set(codec_id::powersgd, powersgd);
  set(codec_id::fp16, cast);
  set(codec_id::bf16, cast);
  return t;
}

}  // namespace

//! Null when no CUDA device is usable, so backend_available(cuda) says so, and
//! cuda_table_unavailable_reason() why.
const backend_table* cuda_backend_table() noexcept {
  static const bool present = problem().empty();
  static const backend_table table = make_table();
  return present ? &table : nullptr;
}

std::string_view cuda_table_unavailable_reason() noexcept { return problem(); }

}  // namespace gradcodec::detail
