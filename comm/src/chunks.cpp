// SPDX-License-Identifier: Apache-2.0
//! @file
//! Chunks in whole codec units.
#include "comm/src/chunks.hpp"

#include "gradcodec/blocks/codec_traits.hpp"

namespace gradcodec::comm::detail {

range chunk_of(std::uint64_t len, std::uint64_t unit, int world, int c) noexcept {
  const std::uint64_t units = (len + unit - 1) / unit;
  const auto w = static_cast<std::uint64_t>(world);
  const auto cc = static_cast<std::uint64_t>(c);
  const std::uint64_t base = units / w, rem = units % w;
  const std::uint64_t first = cc * base + std::min(cc, rem);
  const std::uint64_t count = base + (cc < rem ? 1 : 0);
  const std::uint64_t begin = std::min(len, first * unit);
  const std::uint64_t end = std::min(len, (first + count) * unit);
  return {begin, end - begin};
}

std::uint64_t unit_of(const codec_spec& spec) noexcept {
  return blocks::traits_of(spec.id).bucketed ? spec.bucket : 1;
}

}  // namespace gradcodec::comm::detail
