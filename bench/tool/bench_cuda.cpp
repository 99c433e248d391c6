// SPDX-License-Identifier: Apache-2.0
//! @file
//! gradcodec bench --backend cuda: the codec benchmark on device memory. Each time is the
//! median of CUDA-event timings of single calls on one stream, after a warm-up, with L2
//! flushed before every timed call (a memset of 4x the L2 size), so small sizes are not
//! served from cache. The denominator is a device-to-device cudaMemcpyAsync of the same
//! data (8 bytes per element moved), measured the same way in the same run.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "bench_common.hpp"
#include "bench_cuda.hpp"
#include "bench_model.hpp"
#include "bench_report.hpp"
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
  struct timing {
    double median_s = 0;
    std::uint64_t runs = 0;
  };
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

//! The four operations of one codec on one GPU.
void run_codec(run_state& st, gpu_clock& clk, const codec_spec& spec, const std::string& gpu,
               const std::vector<float>& host_x, const device_buffer& x) {
  const std::uint64_t n = host_x.size();
  const std::uint64_t rows = spec.id == codec_id::powersgd ? powersgd_square_rows(n) : 0;
  const std::string name = to_string(spec);
  const auto base = [&](bench_op op) {
    record r;
    r.codec = name;
    r.backend = "cuda";
    r.isa = gpu;
    r.threads = 0;
    r.n = n;
    r.op = std::string(bench_op_name(op));
    return r;
  };
  status failure;
  // Every codec runs on the CUDA backend: any failure is a failed measurement.
  const auto noted = [&](bench_op op) {
    record r = base(op);
    ++st.failed;
    r.note = "error: " + std::string(status_code_name(failure.code())) + ": " + failure.message();
    st.add(r);
  };

  const auto all_noted = [&] {
    for (const bench_op op :
         {bench_op::encode, bench_op::decode, bench_op::decode_accumulate, bench_op::encode_ef})
      noted(op);
  };

  exec_options opt;
  opt.where = backend::cuda;
  opt.stream = clk.stream;
  const const_tensor_view in{x.ptr, n, dtype::f32, rows};
  std::size_t ws = 0;
  for (const operation op : {operation::encode, operation::encode_with_feedback, operation::decode,
                             operation::decode_accumulate}) {
    auto w = workspace_size(spec, in, op, opt);
    if (!w) {
      failure = w.error();
      all_noted();
      return;
    }
    ws = std::max(ws, w.value());
  }
  device_buffer workspace(ws), frame(encode_bound(spec, n, dtype::f32, rows)), out(4 * n),
      acc(4 * n), residual(4 * n);
  opt.workspace = {workspace.bytes(), ws};
  const context ctx{1, 0, 0};

  std::size_t frame_bytes = 0;
  const auto te = clk.time(st.min_runs, [&] {
    auto w = encode(spec, ctx, in, {frame.bytes(), frame.size}, opt);
    if (!w) failure = w.error();
    if (w) frame_bytes = w.value();
    return w.ok();
  });
  if (te.runs == 0) {
    all_noted();
    return;
  }
  const const_bytes fr{frame.bytes(), frame_bytes};
  std::vector<std::byte> header(header_bytes);
  check(cudaMemcpy(header.data(), frame.ptr, header_bytes, cudaMemcpyDeviceToHost), "header copy");
  const auto h = peek(header);
  const std::uint64_t kept = h ? h.value().count : n;
  const bool sparse = blocks::traits_of(spec.id).selects;
  const tensor_view out_v{out.ptr, n, dtype::f32, rows};

  const auto td = clk.time(st.min_runs, [&] {
    const status s = decode(fr, out_v, opt);
    if (!s.ok()) failure = s;
    return s.ok();
  });
  double err = 0;
  if (td.runs > 0) {
    std::vector<float> decoded(n);
    check(cudaMemcpy(decoded.data(), out.ptr, 4 * n, cudaMemcpyDeviceToHost), "result copy");
    err = rel_error(decoded.data(), host_x);
  }
  const auto finish = [&](bench_op op, const gpu_clock::timing& tm, std::uint64_t bytes_of_frame) {
    if (tm.runs == 0) return noted(op);
    record r = base(op);
    r.median_s = tm.median_s;
    r.runs = tm.runs;
    r.bytes_per_element = bytes_per_element(spec.id, op, n, bytes_of_frame, sparse ? kept : n);
    r.ratio = 4.0 * static_cast<double>(n) / static_cast<double>(bytes_of_frame);
    r.rel_error = err;
    st.add(r);
  };
  finish(bench_op::encode, te, frame_bytes);
  finish(bench_op::decode, td, frame_bytes);

  // On the timed stream: it is non-blocking, so a legacy-stream memset would not be ordered.
  check(cudaMemsetAsync(acc.ptr, 0, 4 * n, clk.stream), "cudaMemsetAsync");
  const tensor_view acc_v{acc.ptr, n, dtype::f32, rows};
  const auto ta = clk.time(st.min_runs, [&] {
    const status s = decode_accumulate(fr, acc_v, 1.0f, opt);
    if (!s.ok()) failure = s;
    return s.ok();
  });
  finish(bench_op::decode_accumulate, ta, frame_bytes);

  check(cudaMemsetAsync(residual.ptr, 0, 4 * n, clk.stream), "cudaMemsetAsync");
  const tensor_view res_v{residual.ptr, n, dtype::f32, rows};
  frame_tally ef_frames;
  const auto tf = clk.time(st.min_runs, [&] {
    auto w = encode_with_feedback(spec, ctx, in, res_v, {frame.bytes(), frame.size}, opt);
    if (!w) failure = w.error();
    if (w) ef_frames.add(w.value());
    return w.ok();
  });
  finish(bench_op::encode_ef, tf, ef_frames.mean());
}

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
      for (const auto& spec : req.specs) run_codec(st, clk, spec, gpu, host_x, x);
    }
  }
}

}  // namespace gradcodec::tool
