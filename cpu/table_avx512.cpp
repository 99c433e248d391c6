// SPDX-License-Identifier: Apache-2.0
//! @file
//! The avx512 variant of the CPU backend (see cpu/table-inl.hpp).
#include "common.hpp"

GRADCODEC_TARGET_BEGIN(GRADCODEC_TARGET_AVX512)
namespace gradcodec::cpu::avx512 {
#define GRADCODEC_CPU_LEVEL 2
#define GRADCODEC_CPU_NAME "cpu-avx512"
#include "table-inl.hpp"
#undef GRADCODEC_CPU_NAME
#undef GRADCODEC_CPU_LEVEL
}  // namespace gradcodec::cpu::avx512
GRADCODEC_TARGET_END
