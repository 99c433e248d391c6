// SPDX-License-Identifier: Apache-2.0
//! @file
//! What the GPU tests ask of their environment: whether a CUDA device is visible (they skip
//! with a message otherwise) and the size cap GRADCODEC_TEST_MAX_N (scripts/gpu-check runs
//! them under compute-sanitizer, which is 10-100x slower, with small sizes only).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdlib>

namespace gradcodec::test {

inline bool have_gpu() {
  int count = 0;
  return cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
}

inline std::size_t max_n() {
  const char* e = std::getenv("GRADCODEC_TEST_MAX_N");
  return e != nullptr ? static_cast<std::size_t>(std::strtoull(e, nullptr, 10)) : ~std::size_t{0};
}

}  // namespace gradcodec::test
