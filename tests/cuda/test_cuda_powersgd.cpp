// SPDX-License-Identifier: Apache-2.0
// The PowerSGD codec (kernels/powersgd.cu) against the reference, byte for byte
// (codec_check.hpp), and the PowerSGD phase API on device memory, queued on a caller's non-blocking
// stream, against the same phases on the host: init_q, then two steps of compute_p, compute_q and
// finish (warm start and error feedback carried), for grad and out in f32 and bf16, W = 1
// and 3, error feedback on and off, one run with a NaN in the gradient. Equal bits, except
// that a NaN need only be a NaN (docs/codecs.md). A step captures into a CUDA graph. Bad
// calls are refused before anything is queued. Skipped without a GPU.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include "codec_check.hpp"
#include "gpu_test_env.hpp"
#include "gradcodec/powersgd.hpp"
#include "support/data.hpp"

namespace gc = gradcodec;
using namespace gc::test;

namespace {

const char* const kPowersgdSpecs[] = {"powersgd", "powersgd:rank=8,eps=0"};

std::span<float> floats(const device_bytes& d, std::size_t count) {
  return {reinterpret_cast<float*>(d.ptr), count};
}

//! Element i of a host tensor and of the same-typed device bytes agree: equal bits, or
//! both NaN.
void expect_same(const tensor& host, const device_bytes& dev, const char* what) {
  tensor got = host;
  const auto raw = dev.read(host.bytes.size());
  std::memcpy(got.bytes.data(), raw.data(), host.bytes.size());
  for (std::uint64_t i = 0; i < host.n; ++i) {
    const float a = host.get(i), b = got.get(i);
    if (std::isnan(a) && std::isnan(b)) continue;
    std::uint32_t ba = 0, bb = 0;
    std::memcpy(&ba, &a, 4);
    std::memcpy(&bb, &b, 4);
    ASSERT_EQ(ba, bb) << what << "[" << i << "]: host " << a << ", device " << b;
  }
}

void expect_same(const std::vector<float>& host, const device_bytes& dev, const char* what) {
  expect_same(tensor(host, gc::dtype::f32), dev, what);
}

struct matrix_shape {
  std::uint64_t rows, cols;
  std::uint32_t rank;
};

void check_phases(matrix_shape sh, gc::dtype grad_type, gc::dtype out_type, int world, bool ef,
                  bool with_nan) {
  SCOPED_TRACE(std::to_string(sh.rows) + "x" + std::to_string(sh.cols) + " rank " +
               std::to_string(sh.rank) + " grad " + std::string(gc::dtype_name(grad_type)) +
               " out " + std::string(gc::dtype_name(out_type)) + " W " + std::to_string(world) +
               (ef ? " ef" : "") + (with_nan ? " nan" : ""));
  gc::codec_spec spec = gc::make_spec(gc::codec_id::powersgd);
  spec.rank = sh.rank;
  const std::uint64_t rows = sh.rows, cols = sh.cols, n = rows * cols;
  const std::uint32_t r = gc::powersgd_rank(spec, rows, cols);
  cudaStream_t s = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  gc::exec_options on_gpu;
  on_gpu.where = gc::backend::cuda;
  on_gpu.stream = s;
  const gc::context ctx{11, 0, 7};

  std::vector<float> q(cols * r), p(rows * r), res = gaussian(n, 3, 0.1f);
  device_bytes dq(q.size() * 4), dp(p.size() * 4), dres(tensor(res, gc::dtype::f32).bytes);
  ASSERT_TRUE(gc::powersgd_init_q(spec, ctx, rows, cols, q).ok());
  ASSERT_TRUE(gc::powersgd_init_q(spec, ctx, rows, cols, floats(dq, q.size()), on_gpu).ok());
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  expect_same(q, dq, "init q");

  for (int step = 0; step < 2; ++step) {
    auto values = gaussian(n, 100 + static_cast<std::uint64_t>(step));
    if (with_nan && step == 1) values[n / 2] = std::numeric_limits<float>::quiet_NaN();
    const tensor g(values, grad_type, rows);
    device_bytes dg(g.bytes);
    ASSERT_TRUE(gc::powersgd_compute_p(spec, g.cview(), res, q, p).ok());
    const auto st = gc::powersgd_compute_p(spec, {dg.ptr, n, grad_type, rows}, floats(dres, n),
                                           floats(dq, q.size()), floats(dp, p.size()), on_gpu);
    ASSERT_TRUE(st.ok()) << st.message();
    ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
    expect_same(p, dp, "p");
    expect_same(res, dres, "residual after compute_p");

    ASSERT_TRUE(gc::powersgd_compute_q(spec, p, res, rows, cols, q).ok());
    ASSERT_TRUE(gc::powersgd_compute_q(spec, floats(dp, p.size()), floats(dres, n), rows, cols,
                                       floats(dq, q.size()), on_gpu)
                    .ok());
    ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
    expect_same(p, dp, "orthogonalized p");
    expect_same(q, dq, "q");

    tensor out = tensor::zeros(n, out_type, rows);
    device_bytes dout(out.bytes.size());
    ASSERT_TRUE(gc::powersgd_finish(spec, p, q, world, ef, res, out.mview()).ok());
    ASSERT_TRUE(gc::powersgd_finish(spec, floats(dp, p.size()), floats(dq, q.size()), world, ef,
                                    floats(dres, n), {dout.ptr, n, out_type, rows}, on_gpu)
                    .ok());
    ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
    expect_same(q, dq, "q / W");
    expect_same(res, dres, "residual after finish");
    expect_same(out, dout, "out");
  }
  cudaStreamDestroy(s);
}

TEST(CudaPowersgdPhases, MatchTheHostPhases) {
  SKIP_WITHOUT_GPU();
  // Q = M^T P runs a warp per entry below 2^15 entries and a thread per entry from there:
  // 16 x 16384 at rank 2 takes the thread path, 16384 x 16 (64 chunks of rows) the warp path.
  // The orthogonalization splits rows over a warp per 512: 40000 rows take 32 warps (rounds
  // of 64 chunks and a tail of 29), 2500 x 1300 eight warps for P and four for Q.
  const matrix_shape shapes[] = {{3, 5, 2},      {40, 50, 4},    {257, 129, 8},
                                 {64, 4097, 1},  {1000, 999, 4}, {16, 16384, 2},
                                 {16384, 16, 2}, {40000, 8, 4},  {2500, 1300, 3}};
  for (const matrix_shape& sh : shapes) {
    if (sh.rows * sh.cols > max_n()) continue;  // under compute-sanitizer: small sizes only
    check_phases(sh, gc::dtype::f32, gc::dtype::f32, 1, true, false);
    check_phases(sh, gc::dtype::bf16, gc::dtype::bf16, 3, true, false);
    check_phases(sh, gc::dtype::f32, gc::dtype::f32, 3, false, false);
  }
  check_phases({40, 50, 4}, gc::dtype::f32, gc::dtype::f32, 1, true, true);
}

// Many layers at once: 70 matrices of mixed shapes (two launches of up to 64) in one
// device buffer, against the host batch; then Q = M^T P of one layer by project_q.
TEST(CudaPowersgdPhases, BatchedOrthogonalizationMatchesTheHost) {
  SKIP_WITHOUT_GPU();
  gc::codec_spec spec = gc::make_spec(gc::codec_id::powersgd);
  std::vector<std::uint64_t> rows, at;
  std::vector<std::uint32_t> ranks;
  std::uint64_t total = 0;
  for (int t = 0; t < 70; ++t) {
    // t = 3: one row and eight columns (rows < r); t = 69: 20000 rows, so the second launch
    // orthogonalizes its six matrices with 32 warps each.
    rows.push_back(t == 3 ? 1 : t == 69 ? 20000 : 1 + static_cast<std::uint64_t>(t * 37 % 300));
    ranks.push_back(t == 3 ? 8 : 1 + static_cast<std::uint32_t>(t % 8));
    at.push_back(total);
    total += rows.back() * ranks.back();
  }
  std::vector<float> host = gaussian(total, 4242);
  device_bytes dev(tensor(host, gc::dtype::f32).bytes);
  std::vector<gc::powersgd_matrix> hb, db;
  for (std::size_t t = 0; t < rows.size(); ++t) {
    hb.push_back({{host.data() + at[t], rows[t] * ranks[t]}, rows[t], ranks[t]});
    db.push_back({floats(dev, total).subspan(at[t], rows[t] * ranks[t]), rows[t], ranks[t]});
  }
  cudaStream_t s = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  gc::exec_options on_gpu;
  on_gpu.where = gc::backend::cuda;
  on_gpu.stream = s;
  ASSERT_TRUE(gc::powersgd_orthogonalize_batch(hb, spec.eps).ok());
  ASSERT_TRUE(gc::powersgd_orthogonalize_batch(db, spec.eps, on_gpu).ok());
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  expect_same(host, dev, "orthogonalised batch");
  // project_q on one orthonormal P equals the host's.
  const std::uint64_t layer = 5, cols = 33;
  spec.rank = ranks[layer];
  const std::vector<float> mh = gaussian(rows[layer] * cols, 99);
  device_bytes dm(tensor(mh, gc::dtype::f32).bytes), dq(cols * ranks[layer] * 4);
  std::vector<float> q(cols * ranks[layer]);
  ASSERT_TRUE(gc::powersgd_project_q(spec, hb[layer].a, mh, rows[layer], cols, q).ok());
  ASSERT_TRUE(gc::powersgd_project_q(spec, db[layer].a, floats(dm, mh.size()), rows[layer], cols,
                                     floats(dq, q.size()), on_gpu)
                  .ok());
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  expect_same(q, dq, "project_q");
  cudaStreamDestroy(s);
}

// No phase waits on the host: one step (compute_p, compute_q, finish) is captured in a CUDA
// graph, and each replay carries the warm start and the residual on, as the host phases do.
TEST(CudaPowersgdPhases, OneStepIsCapturableInAGraph) {
  SKIP_WITHOUT_GPU();
  gc::codec_spec spec = gc::make_spec(gc::codec_id::powersgd);
  const std::uint64_t rows = 40, cols = 50, n = rows * cols;
  const std::uint32_t r = gc::powersgd_rank(spec, rows, cols);
  const gc::context ctx{5, 0, 2};
  cudaStream_t s = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  gc::exec_options on_gpu;
  on_gpu.where = gc::backend::cuda;
  on_gpu.stream = s;
  std::vector<float> q(cols * r), p(rows * r), res(n, 0.0f);
  device_bytes dq(q.size() * 4), dp(p.size() * 4), dres(n * 4, 0), dg(n * 4), dout(n * 4);
  const gc::const_tensor_view g_dev{dg.ptr, n, gc::dtype::f32, rows};
  const gc::tensor_view out_dev{dout.ptr, n, gc::dtype::f32, rows};
  auto step = [&] {
    gc::status st = gc::powersgd_compute_p(spec, g_dev, floats(dres, n), floats(dq, q.size()),
                                           floats(dp, p.size()), on_gpu);
    if (st.ok())
      st = gc::powersgd_compute_q(spec, floats(dp, p.size()), floats(dres, n), rows, cols,
                                  floats(dq, q.size()), on_gpu);
    if (st.ok())
      st = gc::powersgd_finish(spec, floats(dp, p.size()), floats(dq, q.size()), 1, true,
                               floats(dres, n), out_dev, on_gpu);
    return st;
  };
  // Once before capturing (lazy module loading: see capture_graph), then the state starts
  // afresh.
  ASSERT_TRUE(step().ok());
  ASSERT_TRUE(gc::powersgd_init_q(spec, ctx, rows, cols, floats(dq, q.size()), on_gpu).ok());
  ASSERT_EQ(cudaMemsetAsync(dres.ptr, 0, n * 4, s), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  ASSERT_TRUE(gc::powersgd_init_q(spec, ctx, rows, cols, q).ok());

  cudaGraphExec_t exec = capture_graph(s, [&] { return step().ok(); });
  ASSERT_NE(exec, nullptr);
  for (std::uint64_t t = 0; t < 2; ++t) {
    const tensor g(gaussian(n, 40 + t), gc::dtype::f32, rows);
    ASSERT_EQ(cudaMemcpyAsync(dg.ptr, g.bytes.data(), g.bytes.size(), cudaMemcpyHostToDevice, s),
              cudaSuccess);
    ASSERT_EQ(cudaGraphLaunch(exec, s), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
    tensor out = tensor::zeros(n, gc::dtype::f32, rows);
    ASSERT_TRUE(gc::powersgd_compute_p(spec, g.cview(), res, q, p).ok());
    ASSERT_TRUE(gc::powersgd_compute_q(spec, p, res, rows, cols, q).ok());
    ASSERT_TRUE(gc::powersgd_finish(spec, p, q, 1, true, res, out.mview()).ok());
    expect_same(q, dq, "q after a replay");
    expect_same(res, dres, "residual after a replay");
    expect_same(out, dout, "out after a replay");
  }
  cudaGraphExecDestroy(exec);
  cudaStreamDestroy(s);
}

TEST(CudaPowersgdPhases, BadCallsAreRefusedBeforeAnythingIsQueued) {
  SKIP_WITHOUT_GPU();
  gc::codec_spec spec = gc::make_spec(gc::codec_id::powersgd);
  spec.rank = 2;
  const std::uint64_t rows = 8, cols = 6, n = rows * cols;
  gc::exec_options on_gpu;
  on_gpu.where = gc::backend::cuda;
  device_bytes dq(cols * 2 * 4, 0), dp(rows * 2 * 4), dres(n * 4, 0), dg(n * 4, 0);
  std::vector<float> host_q(cols * 2);
  // a host array on the CUDA backend
  auto st = gc::powersgd_init_q(spec, {}, rows, cols, host_q, on_gpu);
  EXPECT_EQ(st.code(), gc::status_code::invalid_argument) << st.message();
  st = gc::powersgd_compute_p(spec, {dg.ptr, n, gc::dtype::f32, rows}, floats(dres, n), host_q,
                              floats(dp, rows * 2), on_gpu);
  EXPECT_EQ(st.code(), gc::status_code::invalid_argument) << st.message();
  // nonfinite=error needs a host scan
  gc::codec_spec strict = spec;
  strict.nonfinite = gc::nonfinite_policy::error;
  st = gc::powersgd_compute_p(strict, {dg.ptr, n, gc::dtype::f32, rows}, floats(dres, n),
                              floats(dq, cols * 2), floats(dp, rows * 2), on_gpu);
  EXPECT_EQ(st.code(), gc::status_code::invalid_argument) << st.message();
  // nothing was queued: q and the residual are as they were
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const auto q_now = dq.read(cols * 2 * 4);
  for (std::size_t i = 0; i < cols * 2 * 4; ++i) ASSERT_EQ(q_now[i], std::byte{0});
  const auto res_now = dres.read(n * 4);
  for (std::size_t i = 0; i < n * 4; ++i) ASSERT_EQ(res_now[i], std::byte{0});
  // automatic with device arrays picks the GPU (default stream)
  ASSERT_TRUE(gc::powersgd_init_q(spec, {}, rows, cols, floats(dq, cols * 2)).ok());
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  std::vector<float> want(cols * 2);
  ASSERT_TRUE(gc::powersgd_init_q(spec, {}, rows, cols, want).ok());
  expect_same(want, dq, "automatic init q");
}

}  // namespace

GRADCODEC_CUDA_FAMILY_TESTS(CudaPowersgd, kPowersgdSpecs);
