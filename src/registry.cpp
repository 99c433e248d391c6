// SPDX-License-Identifier: Apache-2.0
//! @file
//! Which optional backends this build contains (set by CMake).
#include "backend.hpp"

namespace gradcodec::detail {

#if GRADCODEC_HAVE_CPU_BACKEND
const backend_table* cpu_backend_table() noexcept;
#endif
#if GRADCODEC_HAVE_CUDA_BACKEND
const backend_table* cuda_backend_table() noexcept;
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

}  // namespace gradcodec::detail
