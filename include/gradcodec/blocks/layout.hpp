// SPDX-License-Identifier: Apache-2.0
//! @file
//! Payload layouts: where each section of a codec's payload starts and how long it is.
//! Shared by every backend and by fused kernels outside the library, so all of them
//! agree on the bytes. Offsets are relative to the payload start (header_bytes into the
//! frame); every section starts 16-byte aligned and padding bytes are zero.
#pragma once

#include <cstdint>

#include "gradcodec/blocks/config.hpp"

namespace gradcodec::blocks {

GRADCODEC_HD constexpr std::uint64_t align16(std::uint64_t x) {
  return (x + 15u) & ~std::uint64_t{15};
}
GRADCODEC_HD constexpr std::uint64_t ceil_div(std::uint64_t a, std::uint64_t b) {
  return (a + b - 1) / b;
}

//! Sparse payload (topk, dgc, threshold): k values of the frame dtype, then k ascending
//! indices (u32, or u64 when n >= 2^32).
struct sparse_layout {
  std::uint64_t values_offset, values_bytes, index_offset, index_bytes, total;
};
GRADCODEC_HD constexpr sparse_layout sparse_layout_of(std::uint64_t k, std::uint64_t value_size,
                                                      bool index64) {
  sparse_layout l{};
  l.values_offset = 0;
  l.values_bytes = k * value_size;
  l.index_offset = align16(l.values_bytes);
  l.index_bytes = k * (index64 ? 8u : 4u);
  l.total = align16(l.index_offset + l.index_bytes);
  return l;
}

//! Random-k payload: 16 bytes of generator key material, then k values.
struct randomk_layout {
  std::uint64_t key_offset, values_offset, values_bytes, total;
};
GRADCODEC_HD constexpr randomk_layout randomk_layout_of(std::uint64_t k, std::uint64_t value_size) {
  randomk_layout l{};
  l.key_offset = 0;
  l.values_offset = 16;
  l.values_bytes = k * value_size;
  l.total = align16(l.values_offset + l.values_bytes);
  return l;
}

//! Bucketed payload (qsgd, terngrad, minmax, onebit, sign): per bucket `scales` f32 values
//! (bucket-major), then the codes as one LSB-first bit stream of `bits` per element.
struct bucket_layout {
  std::uint64_t buckets, scales_offset, scales_bytes, codes_offset, codes_bytes, total;
};
GRADCODEC_HD constexpr bucket_layout bucket_layout_of(std::uint64_t n, std::uint64_t bucket,
                                                      std::uint32_t scales, std::uint32_t bits) {
  bucket_layout l{};
  l.buckets = ceil_div(n, bucket);
  l.scales_offset = 0;
  l.scales_bytes = l.buckets * scales * 4u;
  l.codes_offset = align16(l.scales_bytes);
  l.codes_bytes = ceil_div(n * bits, 8);
  l.total = align16(l.codes_offset + l.codes_bytes);
  return l;
}

//! Block-scaled payload (mxfp8, mxfp6, mxfp4, mxint8, nvfp4, fp8row): the rotation's 16
//! bytes of key material when rotated, nvfp4's f32 tensor scale in a 16-byte slot, one
//! scale of `scale_bytes` per block, then the codes as one LSB-first bit stream.
struct block_scaled_layout {
  std::uint64_t blocks, key_offset, tensor_scale_offset, scales_offset, scales_bytes, codes_offset,
      codes_bytes, total;
};
GRADCODEC_HD constexpr block_scaled_layout block_scaled_layout_of(
    std::uint64_t n, std::uint64_t block, std::uint32_t scale_bytes, bool tensor_scale,
    std::uint32_t bits, bool rotated) {
  block_scaled_layout l{};
  l.blocks = ceil_div(n, block);
  std::uint64_t at = 0;
  l.key_offset = at;
  if (rotated) at += 16;
  l.tensor_scale_offset = at;
  if (tensor_scale) at += 16;
  l.scales_offset = at;
  l.scales_bytes = l.blocks * scale_bytes;
  l.codes_offset = align16(at + l.scales_bytes);
  l.codes_bytes = ceil_div(n * bits, 8);
  l.total = align16(l.codes_offset + l.codes_bytes);
  return l;
}

//! Cast payload (fp16, bf16): n 16-bit values.
GRADCODEC_HD constexpr std::uint64_t cast_payload_bytes(std::uint64_t n) { return align16(n * 2u); }

//! PowerSGD payload: P-hat (rows x r, row-major f32), then Q (cols x r, row-major f32);
//! a bypassed (uncompressed) tensor carries its n values as f32 instead (r = 0).
struct powersgd_layout {
  std::uint64_t p_offset, p_bytes, q_offset, q_bytes, total;
};
GRADCODEC_HD constexpr powersgd_layout powersgd_layout_of(std::uint64_t rows, std::uint64_t cols,
                                                          std::uint32_t r) {
  powersgd_layout l{};
  if (r == 0) {
    l.p_bytes = rows * cols * 4u;
    l.total = align16(l.p_bytes);
    return l;
  }
  l.p_offset = 0;
  l.p_bytes = rows * r * 4u;
  l.q_offset = align16(l.p_bytes);
  l.q_bytes = cols * r * 4u;
  l.total = align16(l.q_offset + l.q_bytes);
  return l;
}

}  // namespace gradcodec::blocks
