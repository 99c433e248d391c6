// SPDX-License-Identifier: Apache-2.0
//! @file
//! The parameter grid of the every-codec tests: each spec of kSpecs x f32/f16/bf16 x the
//! small sizes, and a test name for each case; rows_for gives PowerSGD a matrix.
#pragma once

#include <gtest/gtest.h>

#include <cctype>
#include <cstdint>
#include <string>
#include <vector>

#include "gradcodec/dtype.hpp"
#include "support/specs.hpp"

namespace gradcodec::test {

struct codec_case {
  std::string spec;
  dtype type;
  std::uint64_t n;
};

inline std::vector<codec_case> every_codec_case() {
  std::vector<codec_case> out;
  for (const char* s : kSpecs)
    for (auto t : {dtype::f32, dtype::f16, dtype::bf16})
      for (std::uint64_t n : {0ull, 1ull, 7ull, 4097ull}) out.push_back({s, t, n});
  return out;
}

inline std::string codec_case_name(const testing::TestParamInfo<codec_case>& p) {
  std::string s =
      p.param.spec + "_" + std::string(dtype_name(p.param.type)) + "_" + std::to_string(p.param.n);
  for (auto& c : s)
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  return s + "_" + std::to_string(p.index);
}

//! A row count that makes PowerSGD see a matrix (4097 = 17 x 241).
inline std::uint64_t rows_for(std::uint64_t n) { return n == 4097 ? 17 : n; }

}  // namespace gradcodec::test
