// SPDX-License-Identifier: Apache-2.0
// The CUDA backend against the reference, on a GPU (skipped with a message without one):
// for every codec it offers, f32/f16/bf16 input, sizes 0, 1, 7, 4097, 2^20 + 3 and 2^26,
// fresh random data with NaN/Inf, subnormal, +-FLT_MAX and -0.0 runs: the encoded frame
// is byte-identical, decode and decode-accumulate write identical bits, and fused error
// feedback gives the reference's frame and residual. Every output is poisoned before the
// call, and bytes past the frame must stay poisoned. Plus the device-path checks: automatic
// backend choice by pointer, misaligned frames, nonfinite=error, corrupt headers.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "gpu_test_env.hpp"
#include "gradcodec/blocks/layout.hpp"
#include "support/data.hpp"

namespace gc = gradcodec;
using namespace gc::test;

namespace {

std::vector<float> stress(std::size_t n, std::uint64_t seed) {
  auto v = with_extremes(n, seed, 64);
  if (n > 100) v[n / 3] = std::numeric_limits<float>::quiet_NaN();
  if (n > 100) v[2 * n / 3] = -std::numeric_limits<float>::infinity();
  return v;
}

//! The values of one (kind, n, seed, scale), generated once per process: a 2^26-element
//! vector takes seconds on the host, and every spec and dtype of a size reuses it.
const std::vector<float>& cached(bool extremes, std::size_t n, std::uint64_t seed,
                                 float scale = 1.0f) {
  static std::map<std::tuple<bool, std::size_t, std::uint64_t, float>, std::vector<float>> made;
  const auto key = std::make_tuple(extremes, n, seed, scale);
  auto it = made.find(key);
  if (it == made.end())
    it = made.emplace(key, extremes ? stress(n, seed) : gaussian(n, seed, scale)).first;
  return it->second;
}

const char* const kSpecs[] = {
    "fp16",
    "bf16",
    "qsgd",
    "qsgd:rounding=nearest,norm=max,bucket=17",
    "qsgd:levels=127,bucket=4101",
    "terngrad",
    "terngrad:clip=2.5,bucket=257",
    "minmax",
    "minmax:bits=3,bucket=33,rounding=stochastic",
    "minmax:bits=8,bucket=2049",
    "sign",
    "sign:scale=mean,bucket=100",
    "sign:scale=l2,bucket=7",
    "onebit",
    "onebit:bucket=3",
    // Buckets of 8192 elements and more take a block each (launch_scales): every codec
    // with block reductions, and a last bucket shorter than the rest.
    "qsgd:bucket=100000",
    "terngrad:clip=2.5,bucket=8192",
    "minmax:bits=4,bucket=9000",
    "sign:scale=mean,bucket=65536",
    "sign:scale=l2,bucket=20001",
    "onebit:bucket=20000",
    "randomk",
    "randomk:ratio=0.3,unbiased=1",
    "randomk:k=3",
    "topk",
    "topk:ratio=0.001",
    "topk:k=1",
    "topk:ratio=0.5",
    "threshold:tau=0.5",
    "threshold:tau=0.5,cap=7",
    "threshold:tau=0",
    "dgc",
    "dgc:ratio=0.01,sample=0.05",
    "powersgd",
    "powersgd:rank=8,eps=0",
    "mxfp8",
    "mxfp8:fmt=e5m2,block=20,rounding=stochastic",
    "mxfp8:rotate=1",
    "mxfp6:fmt=e2m3,rotate=1,block=40",
    "mxfp4:rotate=1,rounding=stochastic",
    "mxint8:block=33",
    "nvfp4",
    "nvfp4:rotate=1,rounding=stochastic",
    "fp8row:block=100",
};

//! PowerSGD's matrix: the largest divisor of n not above sqrt(n) rows (1: sent dense).
std::uint64_t rows_for(const gc::codec_spec& spec, std::uint64_t n) {
  if (spec.id != gc::codec_id::powersgd || n == 0) return 0;
  auto r = static_cast<std::uint64_t>(std::sqrt(static_cast<double>(n)));
  while (r > 1 && n % r != 0) --r;
  return r;
}

gc::exec_options on_cuda(std::byte* ws, std::size_t ws_size) {
  gc::exec_options o;
  o.where = gc::backend::cuda;
  o.workspace = {ws, ws_size};
  return o;
}

std::size_t workspace_for(const gc::codec_spec& spec, const tensor& t, gc::operation op) {
  gc::exec_options o;
  o.where = gc::backend::cuda;
  return gc::workspace_size(spec, t.cview(), op, o).value();
}

//! One spec, dtype and input: encode, decode, decode-accumulate and error feedback (with the
//! residual `e`, of the input's size), against the host results of `oracle`.
void check_case(const char* text, gc::dtype type, const std::vector<float>& values,
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
void check_case(const char* text, gc::dtype type, std::size_t n,
                gc::backend oracle = gc::backend::reference) {
  check_case(text, type, cached(true, n, n * 7 + 1), cached(false, n, n + 9, 0.01f), oracle);
}

}  // namespace

TEST(CudaBackend, EveryCodecMatchesTheReference) {
  SKIP_WITHOUT_GPU();
  for (const char* text : kSpecs)
    for (auto type : {gc::dtype::f32, gc::dtype::f16, gc::dtype::bf16})
      for (std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{7}, std::size_t{4097},
                            (std::size_t{1} << 20) + 3})
        if (n <= max_n()) check_case(text, type, n);
}

// NaNs of every sign and payload, signalling ones too, in the input and in the residual (in
// both at some elements): the device writes the reference's NaN bits on the wire and into the
// residual, where its own arithmetic would make one fixed NaN.
TEST(CudaBackend, NaNPayloadsKeepTheReferenceBits) {
  SKIP_WITHOUT_GPU();
  for (const char* text : kSpecs)
    for (auto type : {gc::dtype::f32, gc::dtype::f16, gc::dtype::bf16})
      for (std::size_t n : {std::size_t{7}, std::size_t{4097}})
        check_case(text, type, with_nan_payloads(n, n + 1, 3),
                   with_nan_payloads(n, n + 2, 5, 0, 0.25f));
}

// At 2^26 elements the host side is the CPU backend, which CI proves byte-identical to the
// reference on every ISA and thread count (CpuMatchesReference up to 2^20 + 3 elements,
// CpuLargeOutput at 2^24 + 37): the scalar reference spends about 45 s on these eight cases,
// the CPU backend on its threads seconds, and GPU time is minutes (docs/cuda.md).
TEST(CudaBackend, LargeTensorMatchesTheCpuBackend) {
  SKIP_WITHOUT_GPU();
  if (max_n() < (std::size_t{1} << 26)) GTEST_SKIP() << "GRADCODEC_TEST_MAX_N is below 2^26";
  for (const char* text : {"qsgd", "minmax", "sign:scale=mean", "fp16", "randomk", "topk", "dgc",
                           "threshold:tau=0.002"})
    check_case(text, gc::dtype::f32, std::size_t{1} << 26, gc::backend::cpu);
}

TEST(CudaBackend, AutomaticPicksTheGpuForDeviceMemory) {
  SKIP_WITHOUT_GPU();
  const gc::codec_spec spec = gc::parse_spec("minmax").value();
  const tensor x(gaussian(5000, 1), gc::dtype::f32);
  device_bytes d_x(x.bytes);
  const std::size_t bound = gc::encode_bound(spec, x.n);
  device_bytes d_frame(bound);
  gc::exec_options o;  // automatic
  const std::size_t ws =
      gc::workspace_size(spec, {d_x.ptr, x.n, gc::dtype::f32, 0}, gc::operation::encode, o).value();
  device_bytes d_ws(ws);
  o.workspace = {d_ws.ptr, ws};
  auto n = gc::encode(spec, {}, {d_x.ptr, x.n, gc::dtype::f32, 0}, {d_frame.ptr, bound}, o);
  ASSERT_TRUE(n) << n.error().message();
  const auto want = encode_vec(spec, {}, x.cview()).value();
  EXPECT_EQ(std::memcmp(d_frame.read(want.size()).data(), want.data(), want.size()), 0);
}

// Encode is stream-ordered without host waits (for every codec but threshold, whose frame
// size needs its count): it can be captured in a CUDA graph, and each replay writes the
// frame of the data the buffer holds then.
TEST(CudaBackend, EncodeIsCapturableInAGraph) {
  SKIP_WITHOUT_GPU();
  for (const char* text : {"qsgd", "minmax:bits=3,bucket=33", "sign:scale=mean", "onebit",
                           "terngrad", "fp16", "randomk", "topk", "dgc", "powersgd"}) {
    SCOPED_TRACE(text);
    const gc::codec_spec spec = gc::parse_spec(text).value();
    const std::size_t n = 4097 * 3;
    // 51 x 241: large enough that PowerSGD compresses (its kernels are captured, not the
    // dense copy).
    const std::uint64_t rows = spec.id == gc::codec_id::powersgd ? 51 : 0;
    const tensor a(stress(n, 1), gc::dtype::f32, rows), b(stress(n, 2), gc::dtype::f32, rows);
    device_bytes d_x(a.bytes);
    const std::size_t bound = gc::encode_bound(spec, n, gc::dtype::f32, rows);
    device_bytes d_frame(bound);
    const std::size_t ws = workspace_for(spec, a, gc::operation::encode);
    device_bytes d_ws(ws);
    cudaStream_t s = nullptr;
    ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
    gc::exec_options o = on_cuda(d_ws.ptr, ws);
    o.stream = s;
    // Once before capturing (lazy module loading: see capture_graph).
    ASSERT_TRUE(
        gc::encode(spec, {3, 1, 4}, {d_x.ptr, n, gc::dtype::f32, rows}, {d_frame.ptr, bound}, o));
    ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
    gc::result<std::size_t> size = std::size_t{0};
    cudaGraphExec_t exec = capture_graph(s, [&] {
      size =
          gc::encode(spec, {3, 1, 4}, {d_x.ptr, n, gc::dtype::f32, rows}, {d_frame.ptr, bound}, o);
      return static_cast<bool>(size);
    });
    ASSERT_NE(exec, nullptr) << (size ? "" : size.error().message());
    for (const tensor* t : {&a, &b}) {
      // On s itself: a non-blocking stream is not ordered after a plain cudaMemcpy.
      ASSERT_EQ(
          cudaMemcpyAsync(d_x.ptr, t->bytes.data(), t->bytes.size(), cudaMemcpyHostToDevice, s),
          cudaSuccess);
      ASSERT_EQ(cudaGraphLaunch(exec, s), cudaSuccess);
      ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
      const auto want = encode_vec(spec, {3, 1, 4}, t->cview()).value();
      ASSERT_EQ(size.value(), want.size());
      EXPECT_EQ(std::memcmp(d_frame.read(want.size()).data(), want.data(), want.size()), 0);
    }
    cudaGraphExecDestroy(exec);
    cudaStreamDestroy(s);
  }
}

TEST(CudaBackend, BadCallsAreRefusedWithoutWriting) {
  SKIP_WITHOUT_GPU();
  const gc::codec_spec spec = gc::parse_spec("qsgd").value();
  const tensor x(gaussian(4097, 2), gc::dtype::f32);
  device_bytes d_x(x.bytes);
  const std::size_t bound = gc::encode_bound(spec, x.n);
  const std::size_t ws = workspace_for(spec, x, gc::operation::encode);
  device_bytes d_ws(ws);
  const gc::const_tensor_view dx{d_x.ptr, x.n, gc::dtype::f32, 0};

  // a frame that does not start 16-byte aligned
  device_bytes d_frame(bound + 16);
  auto r = gc::encode(spec, {}, dx, {d_frame.ptr + 4, bound}, on_cuda(d_ws.ptr, ws));
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code(), gc::status_code::invalid_argument);
  // nonfinite=error cannot scan device memory
  r = gc::encode(gc::parse_spec("qsgd:nonfinite=error").value(), {}, dx, {d_frame.ptr, bound},
                 on_cuda(d_ws.ptr, ws));
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code(), gc::status_code::invalid_argument);
  // host memory on the CUDA backend
  std::vector<std::byte> host_frame(bound);
  r = gc::encode(spec, {}, x.cview(), host_frame, on_cuda(d_ws.ptr, ws));
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code(), gc::status_code::invalid_argument);
  // a host workspace on the CUDA backend (bucketed feedback would write p into it)
  std::vector<std::byte> host_ws(std::max<std::size_t>(ws, 64) + 4 * x.n + 4096);
  device_bytes d_res(std::vector<std::byte>(4 * x.n, std::byte{0}));
  r = gc::encode_with_feedback(spec, {}, dx, {d_res.ptr, x.n, gc::dtype::f32, 0},
                               {d_frame.ptr, bound}, on_cuda(host_ws.data(), host_ws.size()));
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code(), gc::status_code::invalid_argument);
  EXPECT_NE(std::string(r.error().message()).find("workspace"), std::string::npos)
      << r.error().message();
  // automatic with a host input and a device output: the host backend would write into
  // device memory, so the call is refused (the backend follows the input pointer)
  gc::exec_options automatic;
  r = gc::encode(spec, {}, x.cview(), {d_frame.ptr, bound}, automatic);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code(), gc::status_code::invalid_argument);
  EXPECT_NE(std::string(r.error().message()).find("output buffer"), std::string::npos)
      << r.error().message();
  // one byte short
  r = gc::encode(spec, {}, dx, {d_frame.ptr, bound - 1}, on_cuda(d_ws.ptr, ws));
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code(), gc::status_code::output_too_small);
  const auto untouched = d_frame.read(bound);
  for (auto b : untouched) ASSERT_EQ(b, std::byte{0xA5});

  // a corrupt header on the device is reported, the output stays untouched
  auto frame = encode_vec(spec, {}, x.cview()).value();
  frame[10] ^= std::byte{1};
  device_bytes d_bad(frame);
  device_bytes d_out(x.bytes.size());
  const auto st = gc::decode({d_bad.ptr, frame.size()}, {d_out.ptr, x.n, gc::dtype::f32, 0},
                             on_cuda(d_ws.ptr, ws));
  EXPECT_EQ(st.code(), gc::status_code::corrupt_frame);
  for (auto b : d_out.read(x.bytes.size())) ASSERT_EQ(b, std::byte{0xA5});
  // a host frame decoded into device memory under automatic: refused, nothing written
  const auto good = encode_vec(spec, {}, x.cview()).value();
  const auto st_mixed = gc::decode(good, {d_out.ptr, x.n, gc::dtype::f32, 0}, gc::exec_options{});
  EXPECT_EQ(st_mixed.code(), gc::status_code::invalid_argument) << st_mixed.message();
  for (auto b : d_out.read(x.bytes.size())) ASSERT_EQ(b, std::byte{0xA5});

  // a top-k payload whose indices are out of order: refused before anything is written
  const gc::codec_spec topk = gc::parse_spec("topk:k=8").value();
  auto sparse = encode_vec(topk, {}, x.cview()).value();
  const auto l = gc::blocks::sparse_layout_of(8, 4, false);
  std::byte* first = sparse.data() + gc::header_bytes + l.index_offset;
  std::swap_ranges(first, first + 4, first + 4);
  device_bytes d_sparse(sparse);
  for (bool accumulate : {false, true}) {
    device_bytes d_acc(x.bytes.size());
    const gc::tensor_view acc{d_acc.ptr, x.n, gc::dtype::f32, 0};
    const auto st2 =
        accumulate
            ? gc::decode_accumulate({d_sparse.ptr, sparse.size()}, acc, 1.0f, on_cuda(d_ws.ptr, ws))
            : gc::decode({d_sparse.ptr, sparse.size()}, acc, on_cuda(d_ws.ptr, ws));
    EXPECT_EQ(st2.code(), gc::status_code::corrupt_frame);
    for (auto b : d_acc.read(x.bytes.size())) ASSERT_EQ(b, std::byte{0xA5});
  }
}
