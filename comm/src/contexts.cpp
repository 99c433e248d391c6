// SPDX-License-Identifier: Apache-2.0
//! @file
//! Hashing and derived contexts.
#include "comm/src/contexts.hpp"

namespace gradcodec::comm::detail {

std::uint64_t splitmix64(std::uint64_t x) noexcept {
  std::uint64_t z = x + 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

std::uint64_t fnv1a(std::string_view s, std::uint64_t h) noexcept {
  for (char c : s) {
    h ^= static_cast<unsigned char>(c);
    h *= 0x100000001b3ull;
  }
  return h;
}

context derive(const context& ctx, std::uint64_t role, std::uint64_t segment, std::uint64_t chunk,
               std::uint64_t rank) noexcept {
  std::uint64_t id = splitmix64(ctx.tensor_id ^ role);
  id = splitmix64(id ^ segment);
  id = splitmix64(id ^ chunk);
  id = splitmix64(id ^ rank);
  return {ctx.seed, ctx.step, id};
}

}  // namespace gradcodec::comm::detail
