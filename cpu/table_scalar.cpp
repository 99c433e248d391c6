// SPDX-License-Identifier: Apache-2.0
//! @file
//! The scalar variant of the CPU backend (see cpu/table-inl.hpp).
#include "common.hpp"

namespace gradcodec::cpu::scalar {
#define GRADCODEC_CPU_LEVEL 0
#define GRADCODEC_CPU_NAME "cpu-scalar"
#include "table-inl.hpp"
#undef GRADCODEC_CPU_NAME
#undef GRADCODEC_CPU_LEVEL
}  // namespace gradcodec::cpu::scalar
