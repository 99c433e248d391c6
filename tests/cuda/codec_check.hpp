// SPDX-License-Identifier: Apache-2.0
//! @file
//! The CUDA backend against a host oracle, one codec call at a time (the families' tests,
//! test_cuda_<family>.cpp): for a spec, f32/f16/bf16 input, fresh random data with NaN/Inf,
//! subnormal, +-FLT_MAX and -0.0 runs: the encoded frame is byte-identical, decode and
//! decode-accumulate write identical bits, and fused error feedback gives the oracle's frame
//! and residual. Every output is poisoned before the call, and bytes past the frame must stay
//! poisoned.
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <map>
#include <span>
#include <string>
#include <tuple>
#include <vector>

#include "gpu_test_env.hpp"
#include "support/data.hpp"

namespace gc = gradcodec;

namespace gradcodec::test {

inline std::vector<float> stress(std::size_t n, std::uint64_t seed) {
  auto v = with_extremes(n, seed, 64);
  if (n > 100) v[n / 3] = std::numeric_limits<float>::quiet_NaN();
  if (n > 100) v[2 * n / 3] = -std::numeric_limits<float>::infinity();
  return v;
}

//! The values of one (kind, n, seed, scale), generated once per process: a 2^26-element
//! vector takes seconds on the host, and every spec and dtype of a size reuses it.
inline const std::vector<float>& cached(bool extremes, std::size_t n, std::uint64_t seed,
                                        float scale = 1.0f) {
  static std::map<std::tuple<bool, std::size_t, std::uint64_t, float>, std::vector<float>> made;
  const auto key = std::make_tuple(extremes, n, seed, scale);
  auto it = made.find(key);
  if (it == made.end())
    it = made.emplace(key, extremes ? stress(n, seed) : gaussian(n, seed, scale)).first;
  return it->second;
}

//! PowerSGD's matrix: the largest divisor of n not above sqrt(n) rows (1: sent dense).
inline std::uint64_t rows_for(const gc::codec_spec& spec, std::uint64_t n) {
  if (spec.id != gc::codec_id::powersgd || n == 0) return 0;
  auto r = static_cast<std::uint64_t>(std::sqrt(static_cast<double>(n)));
  while (r > 1 && n % r != 0) --r;
  return r;
}

inline gc::exec_options on_cuda(std::byte* ws, std::size_t ws_size) {
  gc::exec_options o;
  o.where = gc::backend::cuda;
  o.workspace = {ws, ws_size};
  return o;
}

inline std::size_t workspace_for(const gc::codec_spec& spec, const tensor& t, gc::operation op) {
  gc::exec_options o;
  o.where = gc::backend::cuda;
  return gc::workspace_size(spec, t.cview(), op, o).value();
}

//! One spec, dtype and input: encode, decode, decode-accumulate and error feedback (with the
//! residual `e`, of the input's size), against the host results of `oracle`.
inline void check_case(const char* text, gc::dtype type, const std::vector<float>& values,
                       const std::vector<float>& e, gc::backend oracle = gc::backend::reference) {
  const std::size_t n = values.size();
  SCOPED_TRACE(std::string(text) + " " + std::string(gc::dtype_name(type)) +
               " n=" + std::to_string(n));
  const gc::codec_spec spec = gc::parse_spec(text).value();
  const gc::context ctx{42, 9, 3};
  const tensor x(values, type, rows_for(spec, n));
  const auto want = encode_vec(spec, ctx, x.cview(), oracle).value();

  device_bytes d_x(x.bytes);
  const std::size_t bound = gc::encode_bound(spec, n, type);
  device_bytes d_frame(bound);
  std::size_t ws_size = workspace_for(spec, x, gc::operation::encode);
  device_bytes d_ws(ws_size);
  const gc::const_tensor_view dx{d_x.ptr, n, type, x.rows};
  auto got_size = gc::encode(spec, ctx, dx, {d_frame.ptr, bound}, on_cuda(d_ws.ptr, ws_size));
  ASSERT_TRUE(got_size) << got_size.error().message();
  ASSERT_EQ(got_size.value(), want.size());
  const auto got = d_frame.read(bound);
  ASSERT_EQ(std::memcmp(got.data(), want.data(), want.size()), 0) << "encoded bytes differ";
  for (std::size_t i = want.size(); i < got.size(); ++i)
    ASSERT_EQ(got[i], std::byte{0xA5}) << "byte " << i << " past the frame was written";

  // decode and decode-accumulate into each output dtype
  for (auto out_type : {gc::dtype::f32, gc::dtype::bf16})
    for (bool accumulate : {false, true}) {
      tensor expected(cached(false, n, n + 5), out_type, x.rows);
      device_bytes d_out(accumulate
                             ? expected.bytes
                             : std::vector<std::byte>(expected.bytes.size(), std::byte{0xA5}));
      ASSERT_TRUE(decode_vec(want, expected.mview(), oracle, accumulate, 0.75f).ok());
      std::size_t dws =
          gc::workspace_size(gc::spec_of(gc::peek(want).value()), expected.cview(),
                             accumulate ? gc::operation::decode_accumulate : gc::operation::decode,
                             on_cuda(nullptr, 0))
              .value();
      // Only the sparse decodes' index check needs a workspace; the others take none.
      const bool sparse = spec.id == gc::codec_id::topk || spec.id == gc::codec_id::dgc ||
                          spec.id == gc::codec_id::threshold;
      if (!sparse) EXPECT_EQ(dws, 0u) << "a decode that uses no workspace asks for one";
      device_bytes d_dws(dws);
      std::byte* const ws = dws > 0 ? d_dws.ptr : nullptr;
      const gc::tensor_view dout{d_out.ptr, n, out_type, x.rows};
      const gc::const_bytes frame{d_frame.ptr, want.size()};
      const auto st = accumulate ? gc::decode_accumulate(frame, dout, 0.75f, on_cuda(ws, dws))
                                 : gc::decode(frame, dout, on_cuda(ws, dws));
      ASSERT_TRUE(st.ok()) << st.message();
      const auto out = d_out.read(expected.bytes.size());
      ASSERT_EQ(std::memcmp(out.data(), expected.bytes.data(), expected.bytes.size()), 0)
          << (accumulate ? "decode_accumulate" : "decode") << " into " << gc::dtype_name(out_type)
          << " differs";
    }

  // fused error feedback: frame and residual
  tensor res_want(e, type, x.rows);
  device_bytes d_res(res_want.bytes);
  // Sized for the oracle itself: the reference has no fused feedback, so its generic
  // composition needs more than the CPU backend that an automatic query would pick.
  gc::exec_options ref;
  ref.where = oracle;
  const auto ef_ws_size =
      gc::workspace_size(spec, x.cview(), gc::operation::encode_with_feedback, ref);
  ASSERT_TRUE(ef_ws_size) << ef_ws_size.error().message();
  std::vector<std::byte> ef_ws_host(ef_ws_size.value());
  ref.workspace = ef_ws_host;
  std::vector<std::byte> ef_want(bound);
  auto ef_size = gc::encode_with_feedback(spec, ctx, x.cview(), res_want.mview(), ef_want, ref);
  ASSERT_TRUE(ef_size) << ef_size.error().message();
  ws_size = workspace_for(spec, x, gc::operation::encode_with_feedback);
  device_bytes d_efws(ws_size);
  device_bytes d_ef(bound);
  auto ef_got = gc::encode_with_feedback(spec, ctx, dx, {d_res.ptr, n, type, x.rows},
                                         {d_ef.ptr, bound}, on_cuda(d_efws.ptr, ws_size));
  ASSERT_TRUE(ef_got) << ef_got.error().message();
  ASSERT_EQ(ef_got.value(), ef_size.value());
  const auto ef_bytes = d_ef.read(bound);
  ASSERT_EQ(std::memcmp(ef_bytes.data(), ef_want.data(), ef_size.value()), 0) << "EF frame differs";
  const auto res = d_res.read(res_want.bytes.size());
  ASSERT_EQ(std::memcmp(res.data(), res_want.bytes.data(), res_want.bytes.size()), 0)
      << "EF residual differs";
}

//! check_case on the stress data of size n, with a small Gaussian residual.
inline void check_case(const char* text, gc::dtype type, std::size_t n,
                       gc::backend oracle = gc::backend::reference) {
  check_case(text, type, cached(true, n, n * 7 + 1), cached(false, n, n + 9, 0.01f), oracle);
}

//! Every spec some family's tests check (codec_check_registration), for the test that
//! every codec is covered.
inline std::vector<std::string>& checked_specs() {
  static std::vector<std::string> all;
  return all;
}
struct codec_check_registration {
  explicit codec_check_registration(std::span<const char* const> specs) {
    for (const char* s : specs) checked_specs().emplace_back(s);
  }
};

//! check_case for every spec, dtype and size 0, 1, 7, 4097, 2^20 + 3 (up to max_n()).
inline void check_every_case(std::span<const char* const> specs) {
  for (const char* text : specs)
    for (auto type : {gc::dtype::f32, gc::dtype::f16, gc::dtype::bf16})
      for (std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{7}, std::size_t{4097},
                            (std::size_t{1} << 20) + 3})
        if (n <= max_n()) check_case(text, type, n);
}

//! NaNs of every sign and payload, signalling ones too, in the input and in the residual (in
//! both at some elements): the device writes the oracle's NaN bits on the wire and into the
//! residual, where its own arithmetic would make one fixed NaN.
inline void check_nan_payloads(std::span<const char* const> specs) {
  for (const char* text : specs)
    for (auto type : {gc::dtype::f32, gc::dtype::f16, gc::dtype::bf16})
      for (std::size_t n : {std::size_t{7}, std::size_t{4097}})
        check_case(text, type, with_nan_payloads(n, n + 1, 3),
                   with_nan_payloads(n, n + 2, 5, 0, 0.25f));
}

}  // namespace gradcodec::test

//! A family's two tests against the reference over its specs, and their registration.
#define GRADCODEC_CUDA_FAMILY_TESTS(Suite, specs) \
  TEST(Suite, EverySpecMatchesTheReference) {     \
    SKIP_WITHOUT_GPU();                           \
    gradcodec::test::check_every_case(specs);     \
  }                                               \
  TEST(Suite, NaNPayloadsKeepTheReferenceBits) {  \
    SKIP_WITHOUT_GPU();                           \
    gradcodec::test::check_nan_payloads(specs);   \
  }                                               \
  static const gradcodec::test::codec_check_registration Suite##_registered { specs }
