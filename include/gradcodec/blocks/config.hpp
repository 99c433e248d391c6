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
