// SPDX-License-Identifier: Apache-2.0
//! @file
//! The avx2 variant of the CPU backend (see cpu/table-inl.hpp).
#include "common.hpp"

GRADCODEC_TARGET_BEGIN(GRADCODEC_TARGET_AVX2)
namespace gradcodec::cpu::avx2 {
#define GRADCODEC_CPU_LEVEL 1
#define GRADCODEC_CPU_NAME "cpu-avx2"
#include "table-inl.hpp"
#undef GRADCODEC_CPU_NAME
#undef GRADCODEC_CPU_LEVEL
}  // namespace gradcodec::cpu::avx2
GRADCODEC_TARGET_END
