// SPDX-License-Identifier: Apache-2.0
//! @file
//! The golden-frame manifest and its input data, shared by the generator and the test.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

#include "support/data.hpp"

namespace gradcodec::test::golden {

struct entry {
  std::string name, spec;
  dtype type = dtype::f32;
  std::uint64_t n = 0, rows = 0;
  context ctx;
};

inline std::vector<entry> read_manifest(const std::string& dir) {
  std::ifstream f(dir + "/MANIFEST.txt");
  std::vector<entry> out;
  for (std::string line; std::getline(f, line);) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream s(line);
    entry e;
    std::string t;
    s >> e.name >> e.spec >> t >> e.n >> e.rows >> e.ctx.seed >> e.ctx.step >> e.ctx.tensor_id;
    e.type = t == "f16" ? dtype::f16 : t == "bf16" ? dtype::bf16 : dtype::f32;
    out.push_back(e);
  }
  return out;
}

//! Gradient-like values with the edge cases the format must freeze: zeros of both signs,
//! exact ties, a constant run, tiny and large magnitudes.
inline std::vector<float> input_values(std::uint64_t n, std::uint64_t seed) {
  std::vector<float> v = gaussian(n, seed);
  for (std::uint64_t i = 0; i < n; i += 97) v[i] = 0.0f;
  for (std::uint64_t i = 13; i < n; i += 101) v[i] = -0.0f;
  for (std::uint64_t i = 29; i < n; i += 89) v[i] = 2.5f;            // ties
  for (std::uint64_t i = 200; i < 240 && i < n; ++i) v[i] = -0.75f;  // a constant run
  if (n > 500) v[500] = 1e-30f, v[501] = -3e4f;
  return v;
}

inline std::vector<std::byte> read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  const std::string s{std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
  std::vector<std::byte> out(s.size());
  std::memcpy(out.data(), s.data(), s.size());
  return out;
}

inline void write_file(const std::string& path, const void* data, std::size_t size) {
  std::ofstream f(path, std::ios::binary);
  f.write(static_cast<const char*>(data), static_cast<std::streamsize>(size));
}

}  // namespace gradcodec::test::golden
