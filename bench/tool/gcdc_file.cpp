// SPDX-License-Identifier: Apache-2.0
//! @file
//! The .gcdc file: frame + shape trailer.
#include "gcdc_file.hpp"

#include <cstring>

#include "array.hpp"
#include "error.hpp"
#include "file_io.hpp"

namespace gradcodec::tool {
namespace {

template <class T>
void put(std::vector<std::byte>& out, T v) {
  const auto at = out.size();
  out.resize(at + sizeof v);
  std::memcpy(out.data() + at, &v, sizeof v);  // little-endian hosts (docs/format.md)
}

template <class T>
T get(const std::byte* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

}  // namespace

std::vector<std::byte> shape_trailer(std::span<const std::uint64_t> shape) {
  if (shape.size() > max_ndim) fail("arrays of more than 64 dimensions are not supported");
  std::vector<std::byte> out;
  out.reserve(12 + 8 * shape.size());
  put<std::uint32_t>(out, shape_magic);
  put<std::uint32_t>(out, static_cast<std::uint32_t>(shape.size()));
  for (const auto d : shape) put<std::uint64_t>(out, d);
  put<std::uint32_t>(out, crc32c(out.data(), out.size()));
  return out;
}

gcdc_file parse_gcdc(std::vector<std::byte> bytes, const std::string& name) {
  const std::string where = "'" + name + "': ";
  gcdc_file f;
  f.bytes = std::move(bytes);
  if (f.bytes.size() < header_bytes)
    fail(where + "truncated: " + std::to_string(f.bytes.size()) +
         " bytes, shorter than the 48-byte frame header");
  auto h = peek(f.bytes);
  if (!h) fail(where + "not a valid gradcodec frame: " + h.error().message());
  f.header = h.value();
  const std::uint64_t frame_bytes = f.header.frame_bytes();
  if (f.bytes.size() < frame_bytes)
    fail(where + "truncated: the frame needs " + std::to_string(frame_bytes) +
         " bytes, the file has " + std::to_string(f.bytes.size()));

  const std::byte* t = f.bytes.data() + frame_bytes;
  const std::uint64_t rest = f.bytes.size() - frame_bytes;
  if (rest == 0) {
    f.shape = {f.header.n};
    return f;
  }
  const std::string bad = where + "bad shape trailer after the frame: ";
  if (rest < 12) fail(bad + "truncated (" + std::to_string(rest) + " bytes)");
  if (get<std::uint32_t>(t) != shape_magic) fail(bad + "bad magic (expected GCSH)");
  const std::uint32_t ndim = get<std::uint32_t>(t + 4);
  if (ndim > max_ndim) fail(bad + "ndim " + std::to_string(ndim) + " above 64");
  const std::uint64_t size = 12 + 8 * std::uint64_t{ndim};
  if (rest != size)
    fail(bad + std::to_string(rest) + " bytes where ndim " + std::to_string(ndim) + " needs " +
         std::to_string(size));
  if (get<std::uint32_t>(t + size - 4) != crc32c(t, size - 4)) fail(bad + "checksum mismatch");
  f.shape.resize(ndim);
  for (std::uint32_t i = 0; i < ndim; ++i) f.shape[i] = get<std::uint64_t>(t + 8 + 8 * i);
  std::uint64_t n = 0;
  if (!element_count(f.shape, UINT64_MAX, n) || n != f.header.n)
    fail(bad + "shape " + shape_string(f.shape) + " does not hold the frame's " +
         std::to_string(f.header.n) + " elements");
  f.has_trailer = true;
  return f;
}

gcdc_file read_gcdc(const std::string& path) { return parse_gcdc(read_file(path), path); }

void write_gcdc(const std::string& path, const_bytes frame, std::span<const std::uint64_t> shape) {
  const auto trailer = shape_trailer(shape);
  write_file(path, {frame, std::span<const std::byte>(trailer)});
}

}  // namespace gradcodec::tool
