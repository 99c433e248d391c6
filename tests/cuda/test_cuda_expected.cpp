// SPDX-License-Identifier: Apache-2.0
// decode_expected on the GPU (skipped with a message without one): the header checked by a
// kernel, the verdict in device memory, no host wait. It decodes what the host decodes bit
// for bit, gives the host's verdict for every damaged frame with the output untouched, and
// can be captured in a CUDA graph and replayed on new frames.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "gpu_test_env.hpp"
#include "gradcodec/blocks/expected_header.hpp"
#include "gradcodec/expected_decode.hpp"
#include "support/codec_cases.hpp"
#include "support/data.hpp"
#include "support/frame_damage.hpp"

namespace gc = gradcodec;
using namespace gc::test;

namespace {

gc::frame_verdict read_verdict(const device_bytes& d) {
  gc::frame_verdict v{};
  std::memcpy(&v, d.read(sizeof v).data(), sizeof v);
  return v;
}

struct result_pair {
  gc::status host_status;
  gc::frame_verdict host, device;
  std::vector<std::byte> host_out, device_out;  // device_out: the bytes plus 256 guard bytes
};

//! decode_expected of `frame` against `expected` on the reference backend and on the GPU,
//! each into a copy of `start` (f32, n elements).
result_pair both(const gc::frame_header& expected, const std::vector<std::byte>& frame,
                 const tensor& start, bool accumulate, float alpha = 0.75f) {
  result_pair r;
  tensor host = start;
  gc::exec_options ref{gc::backend::reference};
  auto ws = gc::workspace_size(
      gc::spec_of(expected), start.cview(),
      accumulate ? gc::operation::decode_accumulate : gc::operation::decode, ref);
  std::vector<std::byte> host_ws(ws.value());
  ref.workspace = host_ws;
  r.host_status = accumulate ? gc::decode_accumulate_expected(expected, frame, host.mview(), alpha,
                                                              &r.host, ref)
                             : gc::decode_expected(expected, frame, host.mview(), &r.host, ref);
  r.host_out = host.bytes;

  gc::exec_options on_gpu{gc::backend::cuda};
  ws = gc::workspace_size(gc::spec_of(expected), start.cview(),
                          accumulate ? gc::operation::decode_accumulate : gc::operation::decode,
                          on_gpu);
  device_bytes d_ws(ws.value());
  on_gpu.workspace = {d_ws.ptr, ws.value()};
  device_bytes d_frame(frame);
  device_bytes d_out(start.bytes);
  device_bytes d_verdict(sizeof(gc::frame_verdict));
  auto* verdict = reinterpret_cast<gc::frame_verdict*>(d_verdict.ptr);
  const gc::tensor_view out{d_out.ptr, start.n, gc::dtype::f32, start.rows};
  const gc::const_bytes f{d_frame.ptr, frame.size()};
  const gc::status st =
      accumulate ? gc::decode_accumulate_expected(expected, f, out, alpha, verdict, on_gpu)
                 : gc::decode_expected(expected, f, out, verdict, on_gpu);
  EXPECT_TRUE(st.ok()) << "the GPU call returns ok and reports through the verdict: "
                       << st.message();
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  r.device = read_verdict(d_verdict);
  r.device_out = d_out.read(start.bytes.size());
  return r;
}

void expect_same(const result_pair& r, const tensor& start) {
  EXPECT_EQ(r.device.code, r.host.code) << gc::verdict_status(r.host).message();
  EXPECT_EQ(r.device.field, r.host.field);
  if (r.host.code == 0) {
    EXPECT_EQ(r.device.count, r.host.count);
  }
  ASSERT_EQ(r.host_out.size(), start.bytes.size());
  EXPECT_EQ(std::memcmp(r.device_out.data(), r.host_out.data(), r.host_out.size()), 0)
      << "decoded bits differ";
  for (std::size_t i = r.host_out.size(); i < r.device_out.size(); ++i)
    ASSERT_EQ(r.device_out[i], std::byte{0xA5}) << "byte " << i << " past the output was written";
}

}  // namespace

TEST(CudaExpectedDecode, EveryCodecMatchesTheHost) {
  SKIP_WITHOUT_GPU();
  for (const char* text : kSpecs)
    for (auto type : {gc::dtype::f32, gc::dtype::f16, gc::dtype::bf16})
      for (std::uint64_t n : {0ull, 1ull, 7ull, 4097ull}) {
        SCOPED_TRACE(std::string(text) + " " + std::string(gc::dtype_name(type)) +
                     " n=" + std::to_string(n));
        const gc::codec_spec spec = gc::parse_spec(text).value();
        const tensor a(gaussian(n, 1), type, rows_for(n));
        tensor b(gaussian(n, 2), type, rows_for(n));
        if (n > 5) b.set(5, std::numeric_limits<float>::infinity());
        const auto expected = gc::peek(encode_vec(spec, {42, 9, 3}, a.cview()).value()).value();
        const auto frame = encode_vec(spec, {42, 9, 3}, b.cview()).value();
        const tensor start(gaussian(n, 3), gc::dtype::f32, rows_for(n));
        for (bool accumulate : {false, true}) {
          const result_pair r = both(expected, frame, start, accumulate);
          ASSERT_TRUE(r.host_status.ok()) << r.host_status.message();
          EXPECT_EQ(r.host.code, 0u);
          expect_same(r, start);
        }
      }
}

TEST(CudaExpectedDecode, DamageGivesTheHostVerdictAndWritesNothing) {
  SKIP_WITHOUT_GPU();
  for (const char* text : kDamagedSpecs) {
    const gc::codec_spec spec = gc::parse_spec(text).value();
    const tensor in(gaussian(4097, 11), gc::dtype::f32, 17);
    const auto frame = encode_vec(spec, {}, in.cview()).value();
    const gc::frame_header expected = gc::peek(frame).value();
    tensor poison = tensor::zeros(4097, gc::dtype::f32, 17);
    std::memset(poison.bytes.data(), 0xA5, poison.bytes.size());
    for (const auto& d : damaged_frames(frame))
      for (bool accumulate : {false, true}) {
        SCOPED_TRACE(std::string(text) + ": " + d.what);
        const result_pair r = both(expected, d.bytes, poison, accumulate);
        EXPECT_EQ(static_cast<gc::verdict_code>(r.host.code), d.want);
        expect_same(r, poison);
        EXPECT_EQ(r.host_out, poison.bytes);
      }
    const result_pair flagged = both(expected, flagged_nonfinite(frame), poison, false);
    EXPECT_EQ(flagged.device.code, 0u);
    expect_same(flagged, poison);
  }
}

// No host wait: decode_accumulate_expected is captured in a graph once per codec, over a
// frame buffer as long as the longest frame, and each replay decodes the frame the buffer
// holds then (threshold: another count each time, the buffer its capacity), or writes
// nothing and says why when that frame is damaged.
TEST(CudaExpectedDecode, IsCapturableInAGraph) {
  SKIP_WITHOUT_GPU();
  for (const char* text : kDamagedSpecs) {
    SCOPED_TRACE(text);
    const gc::codec_spec spec = gc::parse_spec(text).value();
    const std::uint64_t n = 4097;
    std::vector<std::vector<std::byte>> frames;
    for (std::uint64_t seed : {1, 2, 3}) {
      const tensor x(gaussian(n, seed, 0.5f + 0.5f * static_cast<float>(seed)), gc::dtype::f32, 17);
      frames.push_back(encode_vec(spec, {7, seed, 1}, x.cview()).value());
    }
    const gc::frame_header expected = gc::peek(frames[0]).value();
    std::size_t longest = 0;
    for (const auto& f : frames) longest = std::max(longest, f.size());
    device_bytes d_frame(longest);
    const tensor start(gaussian(n, 9), gc::dtype::f32, 17);
    device_bytes d_out(start.bytes);
    device_bytes d_verdict(sizeof(gc::frame_verdict));
    gc::exec_options o{gc::backend::cuda};
    const std::size_t ws = gc::workspace_size(gc::spec_of(expected), start.cview(),
                                              gc::operation::decode_accumulate, o)
                               .value();
    device_bytes d_ws(ws);
    cudaStream_t s = nullptr;
    ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
    o.workspace = {d_ws.ptr, ws};
    o.stream = s;
    auto decode = [&] {
      return gc::decode_accumulate_expected(expected, {d_frame.ptr, longest},
                                            {d_out.ptr, n, gc::dtype::f32, 17}, 0.5f,
                                            reinterpret_cast<gc::frame_verdict*>(d_verdict.ptr), o);
    };
    // Once before capturing, on a real frame (lazy module loading: see capture_graph). The
    // replays below reset the output first.
    ASSERT_EQ(
        cudaMemcpyAsync(d_frame.ptr, frames[0].data(), frames[0].size(), cudaMemcpyHostToDevice, s),
        cudaSuccess);
    ASSERT_TRUE(decode().ok());
    ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
    cudaGraphExec_t exec = capture_graph(s, [&] { return decode().ok(); });
    ASSERT_NE(exec, nullptr);
    for (std::size_t which = 0; which < frames.size(); ++which)
      for (bool damaged : {false, true}) {
        auto bytes = frames[which];
        if (damaged) bytes[9] ^= std::byte{1};
        // Only threshold and dgc frames may be shorter than the buffer the graph was
        // captured with; the fixed-size codecs' frames all have its length.
        ASSERT_TRUE(bytes.size() == longest ||
                    gc::blocks::traits_of(expected.codec).count_from_data);
        ASSERT_EQ(
            cudaMemcpyAsync(d_frame.ptr, bytes.data(), bytes.size(), cudaMemcpyHostToDevice, s),
            cudaSuccess);
        ASSERT_EQ(cudaMemcpyAsync(d_out.ptr, start.bytes.data(), start.bytes.size(),
                                  cudaMemcpyHostToDevice, s),
                  cudaSuccess);
        ASSERT_EQ(cudaGraphLaunch(exec, s), cudaSuccess);
        ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
        tensor want = start;
        if (!damaged) {
          ASSERT_TRUE(
              decode_vec(frames[which], want.mview(), gc::backend::reference, true, 0.5f).ok());
        }
        const auto got = d_out.read(start.bytes.size());
        EXPECT_EQ(std::memcmp(got.data(), want.bytes.data(), want.bytes.size()), 0)
            << "frame " << which << (damaged ? " (damaged)" : "");
        const gc::frame_verdict v = read_verdict(d_verdict);
        EXPECT_EQ(static_cast<gc::verdict_code>(v.code),
                  damaged ? gc::verdict_code::header_checksum : gc::verdict_code::ok);
      }
    cudaGraphExecDestroy(exec);
    cudaStreamDestroy(s);
  }
}

// Argument errors come back from the call itself, before anything is launched.
TEST(CudaExpectedDecode, ArgumentErrorsAreReturned) {
  SKIP_WITHOUT_GPU();
  const tensor in(gaussian(4097, 1), gc::dtype::f32);
  const auto frame = encode_vec(gc::parse_spec("qsgd").value(), {}, in.cview()).value();
  const gc::frame_header expected = gc::peek(frame).value();
  device_bytes d_frame(frame.size() + 16);
  device_bytes d_out(in.bytes.size());
  device_bytes d_verdict(sizeof(gc::frame_verdict));
  auto* verdict = reinterpret_cast<gc::frame_verdict*>(d_verdict.ptr);
  gc::exec_options o{gc::backend::cuda};
  device_bytes d_ws(4096);
  o.workspace = {d_ws.ptr, 4096};
  const gc::tensor_view out{d_out.ptr, in.n, gc::dtype::f32, 0};
  auto refused = [&](gc::const_bytes frame_arg, gc::frame_verdict* v, const char* needle) {
    const gc::status st = gc::decode_expected(expected, frame_arg, out, v, o);
    EXPECT_EQ(st.code(), gc::status_code::invalid_argument) << st.message();
    EXPECT_NE(std::string(st.message()).find(needle), std::string::npos) << st.message();
  };
  refused({d_frame.ptr + 4, frame.size()}, verdict, "16-byte aligned");
  gc::frame_verdict host_verdict{};
  refused({d_frame.ptr, frame.size()}, &host_verdict, "verdict");
  refused(frame, verdict, "frame");
  for (auto b : d_verdict.read(sizeof(gc::frame_verdict))) ASSERT_EQ(b, std::byte{0xA5});
  for (auto b : d_out.read(in.bytes.size())) ASSERT_EQ(b, std::byte{0xA5});
}
