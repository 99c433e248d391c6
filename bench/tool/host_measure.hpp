// SPDX-License-Identifier: Apache-2.0
//! @file
//! The host's clock and memory for the measuring harness (codec_measure.hpp) and the
//! baselines: the steady clock, and buffers placed as PyTorch's CPU allocator places tensors.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <functional>
#include <new>
#include <span>
#include <vector>

#include "bench_common.hpp"
#include "codec_measure.hpp"

namespace gradcodec::tool {

//! One warm-up call, then at least `min_runs` timed calls and more while they add up to
//! under 0.2 s (at most 100): the median of them. `body` returns false on failure.
struct host_clock {
  timing time(std::uint64_t min_runs, const std::function<bool()>& body) const {
    using clock_type = std::chrono::steady_clock;
    timing t;
    if (!body()) return t;
    std::vector<double> times;
    double total = 0;
    while (times.size() < min_runs || (total < 0.2 && times.size() < 100)) {
      const auto t0 = clock_type::now();
      if (!body()) return t;
      const double s = std::chrono::duration<double>(clock_type::now() - t0).count();
      times.push_back(s);
      total += s;
    }
    t.median_s = median(times);
    t.runs = times.size();
    return t;
  }
};

//! Allocates on 64-byte boundaries, as PyTorch's CPU allocator places tensors. A large
//! std::vector lies 16 bytes past a page boundary (glibc's mmap chunks), where the
//! quantizers' and sparse codecs' streaming stores for large decode outputs never run.
template <class T>
struct line_aligned_allocator {
  using value_type = T;
  line_aligned_allocator() = default;
  template <class U>
  line_aligned_allocator(const line_aligned_allocator<U>&) noexcept {}
  T* allocate(std::size_t n) {
    if (void* p = std::aligned_alloc(64, (n * sizeof(T) + 63) / 64 * 64)) return static_cast<T*>(p);
    throw std::bad_alloc();
  }
  void deallocate(T* p, std::size_t) noexcept { std::free(p); }
  template <class U>
  bool operator==(const line_aligned_allocator<U>&) const noexcept {
    return true;
  }
};

//! The buffers of one size (the gradient x and every output), kept across the codecs and
//! targets of that size; the frame and workspace grow to the largest asked for.
class host_memory {
 public:
  static constexpr bool host = true;
  using floats = std::vector<float, line_aligned_allocator<float>>;
  const floats x;  //!< the gradient every codec and baseline of this size reads

  explicit host_memory(std::uint64_t n)
      : x(gradient(n)), out_(n, 0.0f), acc_(n, 0.0f), residual_(n, 0.0f) {}
  std::uint64_t n() const { return x.size(); }
  const void* input() const { return x.data(); }
  std::span<const float> host_input() const { return x; }
  void reserve(std::size_t workspace, std::size_t frame) {
    if (workspace_.size() < workspace) workspace_.assign(workspace, std::byte{0});
    if (frame_.size() < frame) frame_.assign(frame, std::byte{0});
  }
  std::span<std::byte> workspace() { return workspace_; }
  std::span<std::byte> frame() { return frame_; }
  float* out() { return out_.data(); }
  float* acc() { return acc_.data(); }
  float* residual() { return residual_.data(); }
  void zero(float* p) { std::fill(p, p + n(), 0.0f); }
  result<frame_header> peek_frame(std::size_t bytes) const {
    return peek(const_bytes{frame_.data(), bytes});
  }
  std::span<const float> decoded() const { return out_; }

 private:
  static floats gradient(std::uint64_t n) {
    floats g(n);
    fill_gradient(g);
    return g;
  }
  floats out_, acc_, residual_;
  std::vector<std::byte> frame_, workspace_;
};

}  // namespace gradcodec::tool
