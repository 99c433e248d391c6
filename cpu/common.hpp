// SPDX-License-Identifier: Apache-2.0
//! @file
//! Everything an ISA translation unit includes before it opens its target region
//! (cpu/target.hpp): standard headers, intrinsics, and the library's own headers, all
//! compiled for the baseline ISA.
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>
#include <utility>

#include "contract/backend.hpp"
#include "contract/block_scaled.hpp"
#include "contract/powersgd_kernels.hpp"
#include "contract/scalar_values.hpp"
#include "contract/vote_kernels.hpp"
#include "gradcodec/blocks/bitstream.hpp"
#include "gradcodec/blocks/block_scaled.hpp"
#include "gradcodec/blocks/float16.hpp"
#include "gradcodec/blocks/fmath.hpp"
#include "gradcodec/blocks/layout.hpp"
#include "gradcodec/blocks/pairwise.hpp"
#include "gradcodec/blocks/philox.hpp"
#include "gradcodec/blocks/quant.hpp"
#include "gradcodec/powersgd.hpp"
#include "target.hpp"
#include "threads.hpp"

namespace gradcodec::cpu {

//! Elements per parallel task for streaming kernels: large enough to amortise the fork,
//! small enough to balance 2-3 threads on 2^20 elements.
inline constexpr std::uint64_t stream_grain = std::uint64_t{1} << 16;

//! Sparse kernels (kernels/sparse-inl.hpp) guess a top-k threshold from a sample of the
//! input: sample j of s sits at a hashed position in the j-th of s equal strata of [0, n).
//! The guess only affects speed (candidates are collected again when it is too high); tests
//! use these two functions to build inputs that defeat it.
inline std::uint64_t topk_sample_size(std::uint64_t n) {
  return n < 4096 ? 0 : std::min<std::uint64_t>(n / 8, 16384);
}
inline std::uint64_t topk_sample_position(std::uint64_t j, std::uint64_t s, std::uint64_t n) {
  const std::uint64_t lo = j * n / s, size = (j + 1) * n / s - lo;  // j * n < 2^62
  std::uint32_t h = static_cast<std::uint32_t>(j) * 0x9E3779B9u;
  h ^= h >> 16;
  h *= 0x85EBCA6Bu;
  h ^= h >> 13;
  h *= 0xC2B2AE35u;
  h ^= h >> 16;
  return lo + blocks::scale_u32(h, size);
}

inline status too_small() {
  return {status_code::output_too_small, "output buffer too small for the payload"};
}
inline status corrupt(std::string_view why) { return {status_code::corrupt_frame, why}; }

//! Function objects for the per-block templates of blocks/block_scaled.hpp. They are
//! defined here, before the target region: a lambda written inside the region carries its
//! ISA and could not be inlined into those templates, which compile for the baseline.
struct f32_load {
  const float* p;
  float operator()(std::uint64_t i) const { return p[i]; }
};
struct any_load {
  const void* p;
  dtype type;
  float operator()(std::uint64_t i) const { return detail::load_value(p, type, i); }
};
struct code_to_buffer {  //!< codes[i - begin] = code
  std::uint32_t* codes;
  std::uint64_t begin;
  void operator()(std::uint64_t i, std::uint32_t code) const { codes[i - begin] = code; }
};
struct code_to_stream {
  std::uint8_t* stream;
  std::uint32_t bits;
  void operator()(std::uint64_t i, std::uint32_t code) const {
    blocks::put_code(stream, i, bits, code);
  }
};
struct element_from_table {  //!< the value of element i's code, from a table of every code
  const float* values;
  const std::uint8_t* stream;
  std::uint32_t bits;
  float operator()(std::uint64_t i) const { return values[blocks::get_code(stream, i, bits)]; }
};
struct value_to_output {  //!< a decoded value stored, or fma-accumulated (canonical NaN)
  tensor_view out;
  float alpha;
  bool accumulate;
  void operator()(std::uint64_t i, float x) const {
    const float v = accumulate ? std::fma(alpha, x, detail::load_value(out.data, out.type, i)) : x;
    detail::store_value(out.data, out.type, i, detail::canonical_nan(v));
  }
};

struct buffer_load {  //!< input i from a buffer holding inputs begin, begin + 1, ...
  const float* p;
  std::uint64_t begin;
  float operator()(std::uint64_t i) const { return p[i - begin]; }
};
struct residual_after_decode {  //!< residual[i] = p[i - begin] - x, as the generic composition
  const float* p;
  std::uint64_t begin;
  void* residual;
  dtype type;
  void operator()(std::uint64_t i, float x) const {
    detail::store_value(residual, type, i, p[i - begin] - detail::canonical_nan(x));
  }
};

}  // namespace gradcodec::cpu
