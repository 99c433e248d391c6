// SPDX-License-Identifier: Apache-2.0
// The CUDA backend's device paths, on a GPU (skipped with a message without one): 2^26
// elements against the CPU backend, automatic backend choice by pointer, capture in a graph,
// misaligned frames, nonfinite=error, corrupt headers. Each codec family's byte-for-byte
// checks against the reference are in test_cuda_<family>.cpp (codec_check.hpp); this file
// checks that every codec has them.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "codec_check.hpp"
#include "gpu_test_env.hpp"
#include "gradcodec/blocks/layout.hpp"
#include "support/data.hpp"

namespace gc = gradcodec;
using namespace gc::test;

// Every codec has a family's tests (test_cuda_<family>.cpp) with at least one spec. Runs
// without a GPU: a codec added without CUDA tests fails here on every machine.
TEST(CudaBackend, EveryCodecIsCheckedByAFamily) {
  for (const gc::codec_info& c : gc::all_codecs()) {
    bool found = false;
    for (const std::string& text : checked_specs())
      found = found || gc::parse_spec(text).value().id == c.id;
    EXPECT_TRUE(found) << c.name << " has no spec in any tests/cuda/test_cuda_<family>.cpp";
  }
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
