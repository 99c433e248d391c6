// SPDX-License-Identifier: Apache-2.0
//! @file
//! Whole-file reads and writes.
#include "file_io.hpp"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>

#include "error.hpp"

namespace gradcodec::tool {
namespace {

struct file_closer {
  void operator()(std::FILE* f) const noexcept { std::fclose(f); }
};
using file_ptr = std::unique_ptr<std::FILE, file_closer>;

std::string why(int err) { return err != 0 ? std::strerror(err) : "I/O error"; }

}  // namespace

std::vector<std::byte> read_file(const std::string& path) {
  errno = 0;
  file_ptr f(std::fopen(path.c_str(), "rb"));
  if (!f) fail("cannot open '" + path + "': " + why(errno));
  std::vector<std::byte> data;
  // Chunked reads work for pipes as well as regular files (no size query needed).
  std::size_t chunk = std::size_t{1} << 16;
  for (;;) {
    const std::size_t old = data.size();
    data.resize(old + chunk);
    errno = 0;
    const std::size_t got = std::fread(data.data() + old, 1, chunk, f.get());
    data.resize(old + got);
    if (got < chunk) {
      if (std::ferror(f.get())) fail("cannot read '" + path + "': " + why(errno));
      break;
    }
    if (chunk < (std::size_t{1} << 26)) chunk *= 2;
  }
  return data;
}

void write_file(const std::string& path, std::initializer_list<std::span<const std::byte>> pieces) {
  errno = 0;
  file_ptr f(std::fopen(path.c_str(), "wb"));
  if (!f) fail("cannot create '" + path + "': " + why(errno));
  bool ok = true;
  int err = 0;
  for (const auto& piece : pieces) {
    errno = 0;
    if (!piece.empty() && std::fwrite(piece.data(), 1, piece.size(), f.get()) != piece.size()) {
      ok = false;
      err = errno;
      break;
    }
  }
  errno = 0;
  // fclose flushes: a full disk may only show up here.
  if (std::fclose(f.release()) != 0 && ok) {
    ok = false;
    err = errno;
  }
  if (!ok) {
    std::remove(path.c_str());
    fail("cannot write '" + path + "': " + why(err));
  }
}

}  // namespace gradcodec::tool
