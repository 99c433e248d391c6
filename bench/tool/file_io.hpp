// SPDX-License-Identifier: Apache-2.0
//! @file
//! Whole-file reads and writes with errno-based messages (C stdio, so the messages name
//! the real cause: "No such file or directory", "Is a directory", ...).
#pragma once

#include <cstddef>
#include <initializer_list>
#include <span>
#include <string>
#include <vector>

namespace gradcodec::tool {

//! The whole content of a file (regular file or pipe). Throws tool::error on failure.
std::vector<std::byte> read_file(const std::string& path);

//! Writes the pieces one after the other into a new or truncated file. On failure the
//! partial file is removed and tool::error is thrown.
void write_file(const std::string& path, std::initializer_list<std::span<const std::byte>> pieces);

}  // namespace gradcodec::tool
