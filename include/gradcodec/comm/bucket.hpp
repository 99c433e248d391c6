// SPDX-License-Identifier: Apache-2.0
//! @file
//! Bucketing: many tensors laid out back to back in one flat buffer, so a whole step's
//! gradients go through one compressed allreduce (one codec call per segment instead of
//! one per tensor). PowerSGD reads each tensor's matrix shape from its slot.
#pragma once

#include <cstdint>
#include <span>

#include "gradcodec/comm/memory.hpp"
#include "gradcodec/status.hpp"
#include "gradcodec/views.hpp"

namespace gradcodec::comm {

//! Where one tensor lives in the flat buffer: elements [offset, offset + n), viewed as a
//! rows x (n / rows) matrix by PowerSGD (rows = 0: a vector, never factorised).
struct tensor_slot {
  std::uint64_t offset = 0;
  std::uint64_t n = 0;
  std::uint64_t rows = 0;

  friend bool operator==(const tensor_slot&, const tensor_slot&) = default;
};

//! Places the tensors back to back, each starting at a multiple of `align` elements
//! (align >= 1), writing one slot per tensor; returns the flat length. slots.size() must
//! equal tensors.size().
std::uint64_t plan_bucket(std::span<const const_tensor_view> tensors, std::span<tensor_slot> slots,
                          std::uint64_t align = 1) noexcept;

//! Copies (and converts) each tensor into its slot of `flat`; the gaps between slots
//! become +0.0.
status pack_bucket(std::span<const const_tensor_view> tensors, std::span<const tensor_slot> slots,
                   tensor_view flat) noexcept;

//! Copies (and converts, rounding to nearest even) each slot of `flat` back into its tensor.
status unpack_bucket(const_tensor_view flat, std::span<const tensor_slot> slots,
                     std::span<const tensor_view> tensors) noexcept;

//! pack_bucket and unpack_bucket into and out of an f32 flat buffer in the memory of `m`
//! (tensors and flat both there: device memory for a device communicator). NaNs become
//! the canonical NaN on the way in.
status pack_bucket(std::span<const const_tensor_view> tensors, std::span<const tensor_slot> slots,
                   tensor_view flat, memory_ops& m) noexcept;
status unpack_bucket(const_tensor_view flat, std::span<const tensor_slot> slots,
                     std::span<const tensor_view> tensors, memory_ops& m) noexcept;

//! Checks that slots are ordered, do not overlap, lie inside n elements, and that each
//! slot's rows divide its n.
status check_slots(std::span<const tensor_slot> slots, std::uint64_t n) noexcept;

}  // namespace gradcodec::comm
