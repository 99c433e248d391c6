// SPDX-License-Identifier: Apache-2.0
//! @file
//! The parameter grid of the every-codec tests: each spec of kSpecs x f32/f16/bf16 x the
//! small sizes (or the part of it a test applies to), a test name and a printed form for
//! each case; rows_for gives PowerSGD a matrix.
#pragma once

#include <gtest/gtest.h>

#include <cctype>
#include <cstdint>
#include <initializer_list>
#include <ostream>
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

//! Every spec with the input dtypes and sizes a test applies to (by default all of them),
//! so that no case is generated only to be skipped.
inline std::vector<codec_case> every_codec_case(
    std::initializer_list<dtype> types = {dtype::f32, dtype::f16, dtype::bf16},
    std::initializer_list<std::uint64_t> sizes = {0, 1, 7, 4097}) {
  std::vector<codec_case> out;
  for (const char* s : kSpecs)
    for (auto t : types)
      for (std::uint64_t n : sizes) out.push_back({s, t, n});
  return out;
}

//! How gtest prints a case (in test listings and failures): "topk:ratio=0.05 f16 n=7".
inline void PrintTo(const codec_case& c, std::ostream* os) {
  *os << c.spec << ' ' << dtype_name(c.type) << " n=" << c.n;
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
