// SPDX-License-Identifier: Apache-2.0
//! @file
//! Packing many tensors into one flat buffer and back.
#include "gradcodec/comm/bucket.hpp"

#include <string>

#include "comm/src/buffers.hpp"
#include "comm/src/slices.hpp"

namespace gradcodec::comm {

using detail::load;
using detail::store;

std::uint64_t plan_bucket(std::span<const const_tensor_view> tensors, std::span<tensor_slot> slots,
                          std::uint64_t align) noexcept {
  if (align == 0) align = 1;
  std::uint64_t at = 0;
  for (std::size_t t = 0; t < tensors.size() && t < slots.size(); ++t) {
    at = (at + align - 1) / align * align;
    slots[t] = {at, tensors[t].n, tensors[t].rows};
    at += tensors[t].n;
  }
  return at;
}

status check_slots(std::span<const tensor_slot> slots, std::uint64_t n) noexcept {
  std::uint64_t end = 0;
  for (std::size_t t = 0; t < slots.size(); ++t) {
    const tensor_slot& s = slots[t];
    if (s.offset < end || s.n > n || s.offset > n - s.n)
      return {status_code::invalid_argument,
              std::string("tensor slot ")
                  .append(std::to_string(t))
                  .append(" overlaps the previous one or lies past n")};
    if (s.rows > 0 && s.n % s.rows != 0)
      return {status_code::invalid_argument, std::string("tensor slot ")
                                                 .append(std::to_string(t))
                                                 .append(": rows do not divide its n")};
    end = s.offset + s.n;
  }
  return {};
}

namespace {

//! The checks pack and unpack share: one slot per tensor, valid slots, matching lengths.
template <class View>
status check_tensors(std::span<const View> tensors, std::span<const tensor_slot> slots,
                     std::uint64_t n, const char* who) {
  const std::string w(who);
  if (tensors.size() != slots.size())
    return {status_code::invalid_argument, w + ": one slot per tensor"};
  if (auto st = check_slots(slots, n); !st.ok()) return st;
  for (std::size_t t = 0; t < slots.size(); ++t) {
    if (tensors[t].n != slots[t].n)
      return {status_code::shape_mismatch, w + ": tensor and slot differ in n"};
    if (tensors[t].n > 0 && tensors[t].data == nullptr)
      return {status_code::invalid_argument, w + ": null tensor"};
  }
  return {};
}

float* f32_at(tensor_view flat, std::uint64_t i) { return static_cast<float*>(flat.data) + i; }
const float* f32_at(const_tensor_view flat, std::uint64_t i) {
  return static_cast<const float*>(flat.data) + i;
}

//! Every tensor must be in m's memory (a host tensor given to device kernels would fault).
template <class View>
status check_memory(std::span<const View> tensors, const memory_ops& m, const char* who) {
  for (const View& t : tensors)
    if (t.n > 0 && !m.accessible(t.data))
      return {status_code::invalid_argument,
              std::string(who).append(": a tensor is not in the communicator's memory")};
  return {};
}

status need_f32(dtype t, const char* who) {
  if (t == dtype::f32) return {};
  return {status_code::invalid_argument, std::string(who).append(": the flat buffer must be f32")};
}

}  // namespace

status pack_bucket(std::span<const const_tensor_view> tensors, std::span<const tensor_slot> slots,
                   tensor_view flat) noexcept {
  if (auto st = check_tensors(tensors, slots, flat.n, "pack_bucket"); !st.ok()) return st;
  std::uint64_t at = 0;
  for (std::size_t t = 0; t < slots.size(); ++t) {
    for (; at < slots[t].offset; ++at) store(flat, at, 0.0f);
    for (std::uint64_t j = 0; j < slots[t].n; ++j)
      store(flat, slots[t].offset + j, load(tensors[t], j));
    at = slots[t].offset + slots[t].n;
  }
  for (; at < flat.n; ++at) store(flat, at, 0.0f);
  return {};
}

status unpack_bucket(const_tensor_view flat, std::span<const tensor_slot> slots,
                     std::span<const tensor_view> tensors) noexcept {
  if (auto st = check_tensors(tensors, slots, flat.n, "unpack_bucket"); !st.ok()) return st;
  for (std::size_t t = 0; t < slots.size(); ++t)
    for (std::uint64_t j = 0; j < slots[t].n; ++j)
      store(tensors[t], j, load(flat, slots[t].offset + j));
  return {};
}

status pack_bucket(std::span<const const_tensor_view> tensors, std::span<const tensor_slot> slots,
                   tensor_view flat, memory_ops& m) noexcept {
  if (auto st = need_f32(flat.type, "pack_bucket"); !st.ok()) return st;
  if (auto st = check_tensors(tensors, slots, flat.n, "pack_bucket"); !st.ok()) return st;
  if (auto st = check_memory(tensors, m, "pack_bucket"); !st.ok()) return st;
  std::uint64_t at = 0;
  for (std::size_t t = 0; t <= slots.size(); ++t) {
    const std::uint64_t next = t < slots.size() ? slots[t].offset : flat.n;
    if (next > at)
      if (auto st = m.zero(f32_at(flat, at), (next - at) * 4); !st.ok()) return st;
    if (t == slots.size()) break;
    if (auto st = m.to_f32(tensors[t], 1.0f, f32_at(flat, next)); !st.ok()) return st;
    at = next + slots[t].n;
  }
  return {};
}

status unpack_bucket(const_tensor_view flat, std::span<const tensor_slot> slots,
                     std::span<const tensor_view> tensors, memory_ops& m) noexcept {
  if (auto st = need_f32(flat.type, "unpack_bucket"); !st.ok()) return st;
  if (auto st = check_tensors(tensors, slots, flat.n, "unpack_bucket"); !st.ok()) return st;
  if (auto st = check_memory(tensors, m, "unpack_bucket"); !st.ok()) return st;
  for (std::size_t t = 0; t < slots.size(); ++t)
    if (auto st = m.from_f32(f32_at(flat, slots[t].offset), tensors[t]); !st.ok()) return st;
  return {};
}

}  // namespace gradcodec::comm
