// SPDX-License-Identifier: Apache-2.0
//! @file
//! Which optional backends this build contains (set by CMake).
#include "contract/backend.hpp"

namespace gradcodec::detail {

#if GRADCODEC_HAVE_CPU_BACKEND
const backend_table* cpu_backend_table() noexcept;
#endif
#if GRADCODEC_HAVE_CUDA_BACKEND
const backend_table* cuda_backend_table() noexcept;
std::string_view cuda_table_unavailable_reason() noexcept;
#endif

const backend_table* cpu_backend() noexcept {
#if GRADCODEC_HAVE_CPU_BACKEND
  return cpu_backend_table();
#else
  return nullptr;
#endif
}

const backend_table* cuda_backend() noexcept {
#if GRADCODEC_HAVE_CUDA_BACKEND
  return cuda_backend_table();
#else
  return nullptr;
#endif
}

std::string_view cuda_unavailable_reason() noexcept {
#if GRADCODEC_HAVE_CUDA_BACKEND
  return cuda_table_unavailable_reason();
#else
  return "not built (configure with GRADCODEC_CUDA=ON and a CUDA toolkit)";
#endif
}

}  // namespace gradcodec::detail
