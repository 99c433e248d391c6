// SPDX-License-Identifier: Apache-2.0
//! @file
//! Deterministic test data and small helpers shared by the test files.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "gradcodec/blocks/float16.hpp"
#include "gradcodec/gradcodec.hpp"

namespace gradcodec::test {

//! Gaussian-like values (Box-Muller over a 64-bit LCG), fixed by the seed.
inline std::vector<float> gaussian(std::size_t n, std::uint64_t seed, float scale = 1.0f) {
  std::vector<float> v(n);
  std::uint64_t s = seed * 6364136223846793005ull + 1442695040888963407ull;
  auto next = [&] {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    return (static_cast<double>(s >> 11) + 0.5) * 0x1p-53;
  };
  for (auto& x : v)
    x = scale * static_cast<float>(std::sqrt(-2.0 * std::log(next())) *
                                   std::cos(6.283185307179586 * next()));
  return v;
}

//! gaussian() with one element in `one_in` replaced by an extreme: a value scaled by
//! 2^-140..2^109, +-0.0, +-FLT_MAX, a subnormal, or a multiple of 0.5 (a rounding tie).
inline std::vector<float> with_extremes(std::size_t n, std::uint64_t seed, std::uint64_t one_in) {
  auto v = gaussian(n, seed);
  std::uint64_t s = seed | 1;
  for (std::size_t i = 0; i < n; ++i) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    switch ((s >> 33) % (one_in < 5 ? 5 : one_in)) {
      case 0: v[i] = std::ldexp(v[i], static_cast<int>((s >> 40) % 250) - 140); break;
      case 1: v[i] = (s >> 45) & 1 ? 0.0f : -0.0f; break;
      case 2: v[i] = (s >> 45) & 1 ? 0x1.fffffep127f : -0x1.fffffep127f; break;
      case 3: v[i] = std::ldexp(static_cast<float>((s >> 40) % 8), -149); break;
      case 4: v[i] = static_cast<float>((s >> 40) % 31) * 0.5f; break;
      default: break;
    }
  }
  return v;
}

//! gaussian() with every `every`-th element (from `first`) a NaN: signs, payloads, quiet and
//! signalling all vary, so a backend that lets another NaN win, or makes its own, differs
//! from the reference in the bytes. Every 7th of those is +-Inf instead.
inline std::vector<float> with_nan_payloads(std::size_t n, std::uint64_t seed, std::size_t every,
                                            std::size_t first = 0, float scale = 1.0f) {
  auto v = gaussian(n, seed, scale);
  std::uint32_t payload = static_cast<std::uint32_t>(seed) * 2654435761u;
  for (std::size_t i = first, j = 0; i < n; i += every, ++j) {
    payload = payload * 1664525u + 1013904223u;
    // Sign from bit 31, quiet bit from bit 22, a payload that is never zero.
    std::uint32_t bits = (payload & 0x80400000u) | 0x7F800000u | ((payload >> 9) & 0x3FFFFFu) | 1u;
    if (j % 7 == 6) bits = (payload & 0x80000000u) | 0x7F800000u;
    std::memcpy(&v[i], &bits, 4);
  }
  return v;
}

//! A tensor of n elements held in a byte vector, in any dtype.
struct tensor {
  dtype type = dtype::f32;
  std::uint64_t n = 0;
  std::uint64_t rows = 0;
  std::vector<std::byte> bytes;

  tensor() = default;
  tensor(const std::vector<float>& v, dtype t, std::uint64_t r = 0)
      : type(t), n(v.size()), rows(r), bytes(v.size() * dtype_size(t)) {
    for (std::uint64_t i = 0; i < n; ++i) set(i, v[i]);
  }
  static tensor zeros(std::uint64_t n, dtype t, std::uint64_t r = 0) {
    return tensor(std::vector<float>(n, 0.0f), t, r);
  }

  float get(std::uint64_t i) const {
    if (type == dtype::f32) {
      float x;
      std::memcpy(&x, bytes.data() + 4 * i, 4);
      return x;
    }
    std::uint16_t h;
    std::memcpy(&h, bytes.data() + 2 * i, 2);
    return type == dtype::f16 ? blocks::f16_to_f32(h) : blocks::bf16_to_f32(h);
  }
  void set(std::uint64_t i, float x) {
    if (type == dtype::f32) {
      std::memcpy(bytes.data() + 4 * i, &x, 4);
    } else {
      const std::uint16_t h = type == dtype::f16 ? blocks::f32_to_f16(x) : blocks::f32_to_bf16(x);
      std::memcpy(bytes.data() + 2 * i, &h, 2);
    }
  }
  const_tensor_view cview() const { return {bytes.data(), n, type, rows}; }
  tensor_view mview() { return {bytes.data(), n, type, rows}; }
};

inline bool same_bits(float a, float b) { return std::memcmp(&a, &b, 4) == 0; }

//! What a decoder writes for x: every NaN becomes the quiet NaN 0x7FC00000.
inline float as_decoded(float x) {
  if (!std::isnan(x)) return x;
  const std::uint32_t canonical = 0x7FC00000u;
  std::memcpy(&x, &canonical, 4);
  return x;
}

//! A byte buffer with poisoned guard zones on both sides, to catch writes out of bounds.
struct guarded {
  static constexpr std::size_t guard = 64;
  static constexpr std::byte poison{0xA5};
  std::vector<std::byte> all;
  std::size_t size;
  explicit guarded(std::size_t n) : all(n + 2 * guard, poison), size(n) {}
  std::byte* data() { return all.data() + guard; }
  mutable_bytes span() { return {data(), size}; }
  bool guards_intact() const {
    for (std::size_t i = 0; i < guard; ++i)
      if (all[i] != poison || all[guard + size + i] != poison) return false;
    return true;
  }
  bool untouched() const {
    for (auto b : all)
      if (b != poison) return false;
    return true;
  }
};

//! Encodes with a workspace sized by the library, on the given backend.
inline result<std::vector<std::byte>> encode_vec(const codec_spec& spec, const context& ctx,
                                                 const_tensor_view in,
                                                 backend where = backend::reference) {
  exec_options opt{where};
  auto ws_size = workspace_size(spec, in, operation::encode, opt);
  if (!ws_size) return ws_size.error();
  std::vector<std::byte> ws(ws_size.value());
  opt.workspace = ws;
  std::vector<std::byte> out(encode_bound(spec, in.n, in.type, in.rows));
  auto n = encode(spec, ctx, in, out, opt);
  if (!n) return n.error();
  out.resize(n.value());
  return out;
}

inline status decode_vec(const std::vector<std::byte>& frame, tensor_view out,
                         backend where = backend::reference, bool accumulate = false,
                         float alpha = 1.0f) {
  exec_options opt{where};
  auto h = peek(frame);
  if (!h) return h.error();
  auto ws_size = workspace_size(spec_of(h.value()), out,
                                accumulate ? operation::decode_accumulate : operation::decode, opt);
  if (!ws_size) return ws_size.error();
  std::vector<std::byte> ws(ws_size.value());
  opt.workspace = ws;
  return accumulate ? decode_accumulate(frame, out, alpha, opt) : decode(frame, out, opt);
}

}  // namespace gradcodec::test
