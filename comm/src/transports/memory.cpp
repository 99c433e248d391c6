// SPDX-License-Identifier: Apache-2.0
//! @file
//! memory.hpp's host buffer services (host_memory()): the loops the strategies ran before
//! device memory had its own (the CUDA ones in cuda_memory.cu compute the same bits).
#include <cstring>
#include <new>

#include "comm/src/slices.hpp"
#include "gradcodec/comm/memory.hpp"

namespace gradcodec::comm {

namespace {

void release_aligned(void* p) noexcept { ::operator delete (p, std::align_val_t{64}); }

status copy_bytes(void* dst, const void* src, std::size_t bytes) {
  if (bytes > 0) std::memcpy(dst, src, bytes);
  return {};
}

class host_memory_ops final : public memory_ops {
 public:
  [[nodiscard]] memory_space space() const noexcept override { return memory_space::host; }
  [[nodiscard]] backend codec_backend(backend requested) const noexcept override {
    return requested;
  }
  [[nodiscard]] bool accessible(const void*) const noexcept override { return true; }

  block allocate(std::size_t bytes) noexcept override {
    void* p = ::operator new (bytes, std::align_val_t{64}, std::nothrow);
    if (p != nullptr) std::memset(p, 0, bytes);
    return block(static_cast<std::byte*>(p), {release_aligned});
  }
  status upload(void* dst, const void* src, std::size_t bytes) override {
    return copy_bytes(dst, src, bytes);
  }
  status download(void* dst, const void* src, std::size_t width, std::size_t pitch,
                  std::size_t rows) override {
    if (width == 0) return {};
    for (std::size_t i = 0; i < rows; ++i)
      std::memcpy(static_cast<std::byte*>(dst) + i * width,
                  static_cast<const std::byte*>(src) + i * pitch, width);
    return {};
  }
  status copy(void* dst, const void* src, std::size_t bytes) override {
    return copy_bytes(dst, src, bytes);
  }
  status zero(void* dst, std::size_t bytes) override {
    if (bytes > 0) std::memset(dst, 0, bytes);
    return {};
  }
  status put_words(void* dst, std::uint64_t first, std::uint64_t second) override {
    detail::put<std::uint64_t>(static_cast<std::byte*>(dst), first);
    detail::put<std::uint64_t>(static_cast<std::byte*>(dst) + 8, second);
    return {};
  }
  status to_f32(const_tensor_view src, float divisor, float* dst) override {
    for (std::uint64_t j = 0; j < src.n; ++j)
      dst[j] = detail::scaled(detail::load(src, j), divisor);
    return {};
  }
  status from_f32(const float* src, tensor_view dst) override {
    for (std::uint64_t j = 0; j < dst.n; ++j) detail::store(dst, j, src[j]);
    return {};
  }
  status accumulate(const_tensor_view v, float alpha_lo, float alpha_hi, std::uint64_t split,
                    float* acc) override {
    for (std::uint64_t j = 0; j < v.n; ++j)
      acc[j] = detail::accumulated(j < split ? alpha_lo : alpha_hi, detail::load(v, j), acc[j]);
    return {};
  }
  status synchronize() override { return {}; }
  [[nodiscard]] host_copy_fn detached_download() const noexcept override { return copy_bytes; }
};

}  // namespace

memory_ops& host_memory() noexcept {
  static host_memory_ops ops;
  return ops;
}

}  // namespace gradcodec::comm
