// SPDX-License-Identifier: Apache-2.0
// A user's kernel built only from the public building blocks writes the library's frames:
// tests/support/fused_codec.hpp (a gradient scaling fused into the encode of each
// bucketed codec, and a bucket decode-accumulate) runs here as device code, one thread
// per bucket, and must give the bytes of gradcodec::encode and the values of
// gradcodec::decode_accumulate (reference backend) bit for bit. Skipped without a GPU.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "gpu_test_env.hpp"
#include "support/data.hpp"
#include "support/fused_codec.hpp"

namespace gc = gradcodec;
using namespace gc::test;

namespace {

#define CUDA_OK(call)                                                      \
  do {                                                                     \
    const cudaError_t e_ = (call);                                         \
    ASSERT_EQ(e_, cudaSuccess) << #call << ": " << cudaGetErrorString(e_); \
  } while (0)

constexpr float kFactor = 0.25f;
constexpr float kAlpha = 0.75f;

__global__ void encode_kernel(fused::params p, gc::blocks::counter_rng rng, std::uint64_t n,
                              fused::scaled_gradient in, std::uint64_t buckets,
                              std::uint8_t* payload, unsigned* nonfinite) {
  for (std::uint64_t b = blockIdx.x * std::uint64_t{blockDim.x} + threadIdx.x; b < buckets;
       b += std::uint64_t{gridDim.x} * blockDim.x)
    if (fused::encode_bucket(p, rng, n, in, b, payload)) atomicOr(nonfinite, 1u);
}

__global__ void decode_kernel(fused::params p, std::uint64_t n, const std::uint8_t* payload,
                              std::uint64_t buckets, float alpha, float* acc) {
  for (std::uint64_t b = blockIdx.x * std::uint64_t{blockDim.x} + threadIdx.x; b < buckets;
       b += std::uint64_t{gridDim.x} * blockDim.x)
    fused::decode_accumulate_bucket(p, n, payload, b, alpha, acc);
}

template <class T>
struct device_buffer {
  T* ptr = nullptr;
  explicit device_buffer(std::size_t count) {
    if (cudaMalloc(&ptr, count * sizeof(T) + 16) != cudaSuccess) ptr = nullptr;
  }
  ~device_buffer() { cudaFree(ptr); }
  device_buffer(const device_buffer&) = delete;
  device_buffer& operator=(const device_buffer&) = delete;
};

// Buckets that start on a byte boundary for every code width run in parallel; others in
// one thread (neighbouring buckets would OR into the same byte).
const char* const kSpecs[] = {
    "qsgd",
    "qsgd:rounding=nearest,norm=max",
    "qsgd:levels=127,bucket=4101",
    "terngrad:clip=2.5",
    "minmax",
    "minmax:bits=3,bucket=33,rounding=stochastic",
    "sign:scale=mean",
    "sign:scale=l2,bucket=7",
    "onebit",
};

}  // namespace

TEST(CudaFusedKernel, EncodeAndDecodeAccumulateMatchTheLibrary) {
  SKIP_WITHOUT_GPU();
  const gc::context ctx{1234, 77, 5};
  for (const char* text : kSpecs)
    for (std::size_t n : {1u, 7u, 4097u, (1u << 20) + 3u}) {
      if (n > max_n()) continue;  // under compute-sanitizer: small sizes only
      SCOPED_TRACE(std::string(text) + " n=" + std::to_string(n));
      const gc::codec_spec spec = gc::parse_spec(text).value();
      const fused::params p = fused::params_of(spec);
      auto values = gaussian(n, n + 1);
      values[n / 2] = std::numeric_limits<float>::quiet_NaN();
      const tensor g(values, gc::dtype::bf16);
      std::vector<float> scaled(n);
      for (std::size_t i = 0; i < n; ++i) scaled[i] = g.get(i) * kFactor;
      const auto expected = encode_vec(spec, ctx, tensor(scaled, gc::dtype::f32).cview()).value();

      const auto l = fused::layout_of(p, n);
      device_buffer<std::uint8_t> d_g(g.bytes.size()), d_payload(l.total);
      device_buffer<unsigned> d_flag(1);
      ASSERT_NE(d_g.ptr, nullptr);
      ASSERT_NE(d_payload.ptr, nullptr);
      ASSERT_NE(d_flag.ptr, nullptr);
      CUDA_OK(cudaMemcpy(d_g.ptr, g.bytes.data(), g.bytes.size(), cudaMemcpyHostToDevice));
      CUDA_OK(cudaMemset(d_payload.ptr, 0, l.total));
      CUDA_OK(cudaMemset(d_flag.ptr, 0, sizeof(unsigned)));
      const bool parallel = p.bucket % 8 == 0;
      encode_kernel<<<parallel ? 64 : 1, parallel ? 128 : 1>>>(
          p, gc::blocks::counter_rng::make(ctx.seed, ctx.step, ctx.tensor_id), n,
          fused::scaled_gradient{d_g.ptr, gc::dtype::bf16, kFactor}, l.buckets, d_payload.ptr,
          d_flag.ptr);
      CUDA_OK(cudaGetLastError());
      std::vector<std::byte> got(gc::header_bytes + l.total);
      unsigned flag = 0;
      CUDA_OK(cudaMemcpy(got.data() + gc::header_bytes, d_payload.ptr, l.total,
                         cudaMemcpyDeviceToHost));
      CUDA_OK(cudaMemcpy(&flag, d_flag.ptr, sizeof flag, cudaMemcpyDeviceToHost));
      gc::frame_header h = gc::peek(expected).value();
      EXPECT_EQ(flag != 0, (h.flags & gc::flag_nonfinite) != 0);
      gc::write_header(h, got.data());
      ASSERT_EQ(got.size(), expected.size());
      ASSERT_EQ(std::memcmp(got.data(), expected.data(), got.size()), 0);

      auto acc0 = gaussian(n, n + 7);
      tensor want(acc0, gc::dtype::f32);
      ASSERT_TRUE(decode_vec(expected, want.mview(), gc::backend::reference, true, kAlpha).ok());
      device_buffer<float> d_acc(n);
      ASSERT_NE(d_acc.ptr, nullptr);
      CUDA_OK(cudaMemcpy(d_acc.ptr, acc0.data(), n * 4, cudaMemcpyHostToDevice));
      decode_kernel<<<parallel ? 64 : 1, parallel ? 128 : 1>>>(p, n, d_payload.ptr, l.buckets,
                                                               kAlpha, d_acc.ptr);
      CUDA_OK(cudaGetLastError());
      std::vector<float> acc(n);
      CUDA_OK(cudaMemcpy(acc.data(), d_acc.ptr, n * 4, cudaMemcpyDeviceToHost));
      for (std::size_t i = 0; i < n; ++i)
        ASSERT_TRUE(same_bits(acc[i], want.get(i))) << "element " << i;
    }
}
