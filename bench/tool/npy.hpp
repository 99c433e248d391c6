// SPDX-License-Identifier: Apache-2.0
//! @file
//! NumPy .npy files (format versions 1.0, 2.0 and 3.0): little-endian float32 ('<f4')
//! and float16 ('<f2') arrays of any shape, C order only.
#pragma once

#include <cstddef>
#include <span>
#include <string>
#include <vector>

#include "array.hpp"

namespace gradcodec::tool {

//! Parses a whole .npy file held in memory. `name` (the path) prefixes error messages.
//! Throws tool::error naming the problem: bad magic, unsupported version, truncated
//! header or data, bytes after the data, a malformed header, fortran_order True, or a
//! dtype other than '<f4' / '<f2' (the message names it).
array parse_npy(std::span<const std::byte> bytes, const std::string& name);

//! The bytes of a .npy file for `a` (f32 or f16). major_version 1, 2 or 3 forces a
//! header version; 0 picks 1.0, or 2.0 when the header does not fit 1.0's 64 KiB.
std::vector<std::byte> format_npy(const array& a, int major_version = 0);
//! Only the header part of format_npy (magic, version, length, padded dictionary).
std::vector<std::byte> format_npy_header(const array& a, int major_version = 0);

array read_npy(const std::string& path);
void write_npy(const std::string& path, const array& a, int major_version = 0);

}  // namespace gradcodec::tool
