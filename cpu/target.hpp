// SPDX-License-Identifier: Apache-2.0
//! @file
//! Per-ISA compilation without global -m flags: each variant TU (cpu/variant.cpp.in) includes every
//! header it needs first (compiled for the baseline), then opens a target region with these macros
//! and includes the kernel sources (*-inl.hpp) inside an ISA namespace. Only functions
//! defined inside the region use the ISA, so nothing shared (std templates, inline helpers)
//! is ever emitted with instructions the running CPU may lack.
#pragma once

#define GRADCODEC_PRAGMA(x) _Pragma(#x)

#if defined(__clang__)
#define GRADCODEC_TARGET_BEGIN(isa_string) \
  GRADCODEC_PRAGMA(clang attribute push(__attribute__((target(isa_string))), apply_to = function))
#define GRADCODEC_TARGET_END GRADCODEC_PRAGMA(clang attribute pop)
#else
#define GRADCODEC_TARGET_BEGIN(isa_string) \
  GRADCODEC_PRAGMA(GCC push_options)       \
  GRADCODEC_PRAGMA(GCC target(isa_string))
#define GRADCODEC_TARGET_END GRADCODEC_PRAGMA(GCC pop_options)
#endif

#define GRADCODEC_TARGET_AVX2 "avx2,fma,f16c,bmi,bmi2,lzcnt,popcnt"
#define GRADCODEC_TARGET_AVX512 GRADCODEC_TARGET_AVX2 ",avx512f,avx512bw,avx512vl,avx512dq"
