// SPDX-License-Identifier: Apache-2.0
//! @file
//! Loading the array a subcommand works on: a .npy file, or raw little-endian values
//! when --dtype names their type (shape [n]).
#pragma once

#include <optional>
#include <string>

#include "array.hpp"

namespace gradcodec::tool {

//! raw_dtype: nothing for .npy, else "f32" (or "f16") for a raw file. An unknown dtype
//! name is a usage error; a raw file whose size is not a multiple of the element size is
//! an error.
array load_input(const std::string& path, const std::optional<std::string>& raw_dtype);

}  // namespace gradcodec::tool
