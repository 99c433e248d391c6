// SPDX-License-Identifier: Apache-2.0
//! @file
//! Portability macros for the header-only building blocks: the same source compiles as
//! host code under g++/clang++ and as __host__ __device__ code under nvcc.
#pragma once

#if defined(__CUDACC__)
#define GRADCODEC_HD __host__ __device__ __forceinline__
#else
#define GRADCODEC_HD inline
#endif

// Per-element work that a loop must inline to be fast: forced on the host too (GCC at -O2
// does not inline a function this size called from two places).
#if defined(__CUDACC__)
#define GRADCODEC_HD_INLINE __host__ __device__ __forceinline__
#elif defined(__GNUC__)
#define GRADCODEC_HD_INLINE inline __attribute__((always_inline))
#else
#define GRADCODEC_HD_INLINE inline
#endif
