// SPDX-License-Identifier: Apache-2.0
//! @file
//! Element types of gradients and their sizes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace gradcodec {

//! Wire values: stored in the frame header, do not renumber.
enum class dtype : std::uint8_t { f32 = 0, f16 = 1, bf16 = 2 };

constexpr std::size_t dtype_size(dtype t) noexcept { return t == dtype::f32 ? 4 : 2; }
constexpr bool dtype_valid(std::uint8_t raw) noexcept { return raw <= 2; }
std::string_view dtype_name(dtype t) noexcept;

}  // namespace gradcodec
