// SPDX-License-Identifier: Apache-2.0
//! @file
//! Loading input arrays.
#include "input.hpp"

#include <cstring>

#include "error.hpp"
#include "file_io.hpp"
#include "npy.hpp"

namespace gradcodec::tool {

array load_input(const std::string& path, const std::optional<std::string>& raw_dtype) {
  if (!raw_dtype) return read_npy(path);
  dtype t = dtype::f32;
  if (*raw_dtype == "f32")
    t = dtype::f32;
  else if (*raw_dtype == "f16")
    t = dtype::f16;
  else
    usage_fail("--dtype: unknown raw dtype '" + *raw_dtype + "' (f32 or f16)");
  const auto bytes = read_file(path);
  const std::size_t size = dtype_size(t);
  if (bytes.size() % size != 0)
    fail("'" + path + "': " + std::to_string(bytes.size()) + " bytes is not a whole number of " +
         std::string(dtype_name(t)) + " values");
  if (bytes.size() / size > (std::uint64_t{1} << 48))
    fail("'" + path + "': more than 2^48 elements");
  array a = array::zeros(t, {bytes.size() / size});
  if (!bytes.empty()) std::memcpy(a.data(), bytes.data(), bytes.size());  // little-endian host
  return a;
}

}  // namespace gradcodec::tool
