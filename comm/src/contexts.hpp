// SPDX-License-Identifier: Apache-2.0
//! @file
//! Hashing and the contexts derived for each frame of a call (docs/comm.md).
#pragma once

#include <cstdint>
#include <string_view>

#include "gradcodec/context.hpp"

namespace gradcodec::comm::detail {

std::uint64_t splitmix64(std::uint64_t x) noexcept;
//! FNV-1a 64 of a byte string.
std::uint64_t fnv1a(std::string_view s, std::uint64_t h = 0xcbf29ce484222325ull) noexcept;

enum : std::uint64_t {
  role_worker = 1,
  role_server = 2,
  role_tensor = 3,
  shared_rank = ~std::uint64_t{0}
};

//! The context of one frame: tensor_id = h(h(h(h(id ^ role) ^ segment) ^ chunk) ^ rank),
//! h = splitmix64. Seed and step are the caller's.
context derive(const context& ctx, std::uint64_t role, std::uint64_t segment, std::uint64_t chunk,
               std::uint64_t rank) noexcept;

}  // namespace gradcodec::comm::detail
