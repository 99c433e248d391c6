// SPDX-License-Identifier: Apache-2.0
//! @file
//! gradcodec bench --backend cuda: the codec benchmark on device memory. Each time is the
//! median of CUDA-event timings of single calls on one stream, after a warm-up, with L2
//! flushed before every timed call (a memset of 4x the L2 size), so small sizes are not
//! served from cache. The denominator is a device-to-device cudaMemcpyAsync of the same
//! data (8 bytes per element moved), measured the same way in the same run.
#include <cuda_runtime.h>

#include <algorithm>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "bench_common.hpp"
#include "bench_cuda.hpp"
#include "bench_report.hpp"
#include "codec_measure.hpp"
#include "error.hpp"
#include "gradcodec/gradcodec.hpp"

namespace gradcodec::tool {
namespace {

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) fail(std::string("CUDA: ") + what + ": " + cudaGetErrorString(e));
}

//! Device memory, freed on scope exit.
struct device_buffer {
  void* ptr = nullptr;
  std::size_t size = 0;
  explicit device_buffer(std::size_t n) : size(n) {
    check(cudaMalloc(&ptr, std::max<std::size_t>(n, 256)), "cudaMalloc");
  }
  ~device_buffer() { cudaFree(ptr); }
  device_buffer(const device_buffer&) = delete;
  device_buffer& operator=(const device_buffer&) = delete;
  std::byte* bytes() const { return static_cast<std::byte*>(ptr); }
};

struct gpu_clock {
  cudaStream_t stream = nullptr;
  cudaEvent_t start = nullptr, stop = nullptr;
  device_buffer flush;  //!< 4x L2, overwritten before every timed call
  explicit gpu_clock(std::size_t l2_bytes) : flush(4 * std::max<std::size_t>(l2_bytes, 1 << 20)) {
    check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
    check(cudaEventCreate(&start), "cudaEventCreate");
    check(cudaEventCreate(&stop), "cudaEventCreate");
  }
  ~gpu_clock() {
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
    cudaStreamDestroy(stream);
  }
  gpu_clock(const gpu_clock&) = delete;
  gpu_clock& operator=(const gpu_clock&) = delete;

  //! Median seconds of `runs` timed calls after one warm-up; 0 runs when body fails.
  template <class Body>
  timing time(std::uint64_t runs, Body body) {
    timing t;
    if (!body()) return t;
    std::vector<double> ms;
    for (std::uint64_t r = 0; r < runs; ++r) {
      check(cudaMemsetAsync(flush.ptr, static_cast<int>(r & 0xFF), flush.size, stream), "L2 flush");
      check(cudaEventRecord(start, stream), "cudaEventRecord");
      if (!body()) return t;
      check(cudaEventRecord(stop, stream), "cudaEventRecord");
      check(cudaEventSynchronize(stop), "cudaEventSynchronize");
      float e = 0;
      check(cudaEventElapsedTime(&e, start, stop), "cudaEventElapsedTime");
      ms.push_back(e);
    }
    t.median_s = median(ms) * 1e-3;
    t.runs = ms.size();
    return t;
  }
};

//! The buffers of one codec on one GPU: the input shared by every codec of a size, and the
//! workspace, frame and outputs allocated for this codec.
class device_memory {
 public:
  static constexpr bool host = false;

  device_memory(const std::vector<float>& host_x, const device_buffer& x, cudaStream_t stream)
      : host_x_(host_x), x_(x), stream_(stream) {}
  std::uint64_t n() const { return host_x_.size(); }
  const void* input() const { return x_.ptr; }
  std::span<const float> host_input() const { return host_x_; }
  void reserve(std::size_t workspace, std::size_t frame) {
    const std::size_t bytes = 4 * n();
    workspace_.emplace(workspace);
    frame_.emplace(frame);
    out_.emplace(bytes);
    acc_.emplace(bytes);
    residual_.emplace(bytes);
  }
  std::span<std::byte> workspace() { return {workspace_->bytes(), workspace_->size}; }
  std::span<std::byte> frame() { return {frame_->bytes(), frame_->size}; }
  float* out() { return static_cast<float*>(out_->ptr); }
  float* acc() { return static_cast<float*>(acc_->ptr); }
  float* residual() { return static_cast<float*>(residual_->ptr); }
  //! On the timed stream: it is non-blocking, so a legacy-stream memset would not be ordered.
  void zero(float* p) { check(cudaMemsetAsync(p, 0, 4 * n(), stream_), "cudaMemsetAsync"); }
  result<frame_header> peek_frame(std::size_t) const {
    std::vector<std::byte> header(header_bytes);
    check(cudaMemcpy(header.data(), frame_->ptr, header_bytes, cudaMemcpyDeviceToHost),
          "header copy");
    return peek(header);
  }
  std::span<const float> decoded() {
    decoded_.resize(n());
    check(cudaMemcpy(decoded_.data(), out_->ptr, 4 * n(), cudaMemcpyDeviceToHost), "result copy");
    return decoded_;
  }

 private:
  const std::vector<float>& host_x_;
  const device_buffer& x_;
  cudaStream_t stream_;
  std::optional<device_buffer> workspace_, frame_, out_, acc_, residual_;
  std::vector<float> decoded_;
};

}  // namespace

void run_bench_cuda(const cuda_bench_request& req, run_state& st) {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0)
    fail("--backend cuda: " + std::string(backend_unavailable_reason(backend::cuda)));
  std::vector<int> gpus = req.gpus;
  if (gpus.empty())
    for (int d = 0; d < count; ++d) gpus.push_back(d);
  for (const int d : gpus) {
    if (d < 0 || d >= count) fail("--gpu: device " + std::to_string(d) + " does not exist");
    check(cudaSetDevice(d), "cudaSetDevice");
    cudaDeviceProp prop{};
    check(cudaGetDeviceProperties(&prop, d), "cudaGetDeviceProperties");
    const std::string gpu = "gpu" + std::to_string(d);
    std::cout << "\n"
              << gpu << ": " << prop.name << ", " << (prop.totalGlobalMem >> 30) << " GiB, L2 "
              << (prop.l2CacheSize >> 20) << " MiB\n";
    gpu_clock clk(static_cast<std::size_t>(prop.l2CacheSize));
    for (const std::uint64_t n : req.sizes) {
      std::cout << "\nn = " << size_name(n) << " (" << n << " elements)\n";
      std::vector<float> host_x(n);
      fill_gradient(host_x);
      device_buffer x(4 * n), copy(4 * n);
      check(cudaMemcpy(x.ptr, host_x.data(), 4 * n, cudaMemcpyHostToDevice), "upload");
      // A pageable upload may return before its DMA lands; the timed stream is not
      // ordered after it.
      check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
      st.out.header();
      record cp;
      cp.codec = "none";
      cp.backend = "baseline";
      cp.isa = gpu;
      cp.threads = 0;
      cp.n = n;
      cp.op = "device_copy";
      cp.ratio = 1.0;
      cp.bytes_per_element = 8.0;
      const auto tc = clk.time(st.min_runs, [&] {
        return cudaMemcpyAsync(copy.ptr, x.ptr, 4 * n, cudaMemcpyDeviceToDevice, clk.stream) ==
               cudaSuccess;
      });
      cp.median_s = tc.median_s;
      cp.runs = tc.runs;
      st.memcpy_gbps = 8.0 * static_cast<double>(n) / tc.median_s * 1e-9;
      st.add(cp);
      measure_target t;
      t.opt.where = backend::cuda;
      t.opt.stream = clk.stream;
      t.backend = "cuda";
      t.isa = gpu;
      t.threads = 0;
      for (const auto& spec : req.specs) {
        device_memory mem(host_x, x, clk.stream);
        measure_codec(st, clk, mem, spec, t);
      }
    }
  }
}

}  // namespace gradcodec::tool
