// SPDX-License-Identifier: Apache-2.0
//! @file
//! One element at a time in any dtype: loads and stores in tensors, and values stored in a
//! wire dtype at an unaligned byte offset. Shared by the reference and the CPU kernels'
//! scalar paths (tails, sparse scatters), so both round the same way.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "gradcodec/blocks/float16.hpp"
#include "gradcodec/blocks/fmath.hpp"
#include "gradcodec/dtype.hpp"

namespace gradcodec::detail {

//! Every NaN a decoder writes is the quiet NaN blocks::canonical_nan_bits
//! (docs/guarantees.md): the sign and payload of a NaN computed from two NaN operands follow
//! operand order, which compilers, libm and GPUs choose differently, so backends could not
//! agree bit for bit otherwise. One definition, shared with the CUDA kernels.
using blocks::canonical_nan_bits;
GRADCODEC_HD float canonical_nan(float x) { return blocks::canonicalize_nan(x); }

//! (__host__ __device__: the CUDA kernels read and write tensors through these too.)
GRADCODEC_HD float load_value(const void* base, dtype t, std::uint64_t i) {
  switch (t) {
    case dtype::f16: return blocks::f16_to_f32(static_cast<const std::uint16_t*>(base)[i]);
    case dtype::bf16: return blocks::bf16_to_f32(static_cast<const std::uint16_t*>(base)[i]);
    case dtype::f32: break;
  }
  return static_cast<const float*>(base)[i];
}

GRADCODEC_HD void store_value(void* base, dtype t, std::uint64_t i, float x) {
  switch (t) {
    case dtype::f16: static_cast<std::uint16_t*>(base)[i] = blocks::f32_to_f16(x); return;
    case dtype::bf16: static_cast<std::uint16_t*>(base)[i] = blocks::f32_to_bf16(x); return;
    case dtype::f32: break;
  }
  static_cast<float*>(base)[i] = x;
}

//! Stores x in the wire dtype (f32 / f16 / bf16) at byte offset `at`.
inline void put_value(std::byte* at, dtype wire, float x) {
  if (wire == dtype::f32) {
    std::memcpy(at, &x, 4);
    return;
  }
  const std::uint16_t h = wire == dtype::f16 ? blocks::f32_to_f16(x) : blocks::f32_to_bf16(x);
  std::memcpy(at, &h, 2);
}

inline float get_value(const std::byte* at, dtype wire) {
  if (wire == dtype::f32) {
    float x;
    std::memcpy(&x, at, 4);
    return x;
  }
  std::uint16_t h;
  std::memcpy(&h, at, 2);
  return wire == dtype::f16 ? blocks::f16_to_f32(h) : blocks::bf16_to_f32(h);
}

}  // namespace gradcodec::detail
