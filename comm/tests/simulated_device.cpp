// SPDX-License-Identifier: Apache-2.0
#include "simulated_device.hpp"

#include <cstring>
#include <map>
#include <mutex>
#include <new>

namespace comm_test {

namespace {

// The registry of live blocks (start -> bytes), shared by every rank's memory: a state's
// blocks are freed by a plain function that knows no instance.
std::mutex registry_mutex;
std::map<const std::byte*, std::size_t>& registry() {
  static std::map<const std::byte*, std::size_t> blocks;
  return blocks;
}
std::atomic<std::uint64_t> refused{0};

void release_block(void* p) noexcept {
  {
    std::lock_guard lock(registry_mutex);
    registry().erase(static_cast<const std::byte*>(p));
  }
  ::operator delete (p, std::align_val_t{64});
}

gc::status outside(const char* what) {
  refused.fetch_add(1);
  return {gc::status_code::internal_error,
          std::string("simulated device: ").append(what).append(" outside device memory")};
}

gc::status checked_download(void* dst, const void* src, std::size_t bytes) {
  if (!simulated_device_memory::inside(src, bytes)) return outside("detached download source");
  if (bytes > 0) std::memcpy(dst, src, bytes);
  return {};
}

std::size_t bytes_of(gc::const_tensor_view v) { return v.n * gc::dtype_size(v.type); }

}  // namespace

bool simulated_device_memory::inside(const void* p, std::size_t bytes) noexcept {
  if (bytes == 0) return true;
  const auto* b = static_cast<const std::byte*>(p);
  std::lock_guard lock(registry_mutex);
  auto it = registry().upper_bound(b);
  if (it == registry().begin()) return false;
  --it;
  return b >= it->first && b + bytes <= it->first + it->second;
}

std::uint64_t simulated_device_memory::violations() noexcept { return refused.load(); }

bool simulated_device_memory::accessible(const void* p) const noexcept { return inside(p, 1); }

gcc::memory_ops::block simulated_device_memory::allocate(std::size_t bytes) noexcept {
  if (failing_ > 0) {
    --failing_;
    return block(nullptr, {release_block});
  }
  const std::size_t n = bytes == 0 ? 1 : bytes;
  void* p = ::operator new (n, std::align_val_t{64}, std::nothrow);
  if (p == nullptr) return block(nullptr, {release_block});
  std::memset(p, 0, n);
  std::lock_guard lock(registry_mutex);
  registry()[static_cast<const std::byte*>(p)] = n;
  return block(static_cast<std::byte*>(p), {release_block});
}

gc::status simulated_device_memory::upload(void* dst, const void* src, std::size_t bytes) {
  if (!inside(dst, bytes)) return outside("upload destination");
  if (bytes > 0 && inside(src, bytes)) {
    refused.fetch_add(1);
    return {gc::status_code::internal_error, "simulated device: upload from device memory"};
  }
  return gcc::host_memory().upload(dst, src, bytes);
}

gc::status simulated_device_memory::download(void* dst, const void* src, std::size_t width,
                                             std::size_t pitch, std::size_t rows) {
  if (rows > 0 && !inside(src, (rows - 1) * pitch + width)) return outside("download source");
  return gcc::host_memory().download(dst, src, width, pitch, rows);
}

gc::status simulated_device_memory::copy(void* dst, const void* src, std::size_t bytes) {
  if (!inside(dst, bytes) || !inside(src, bytes)) return outside("copy range");
  return gcc::host_memory().copy(dst, src, bytes);
}

gc::status simulated_device_memory::zero(void* dst, std::size_t bytes) {
  if (!inside(dst, bytes)) return outside("zero range");
  return gcc::host_memory().zero(dst, bytes);
}

gc::status simulated_device_memory::put_words(void* dst, std::uint64_t first,
                                              std::uint64_t second) {
  if (!inside(dst, 16)) return outside("header");
  return gcc::host_memory().put_words(dst, first, second);
}

gc::status simulated_device_memory::to_f32(gc::const_tensor_view src, float divisor, float* dst) {
  if (!inside(src.data, bytes_of(src)) || !inside(dst, src.n * 4)) return outside("to_f32 range");
  return gcc::host_memory().to_f32(src, divisor, dst);
}

gc::status simulated_device_memory::from_f32(const float* src, gc::tensor_view dst) {
  if (!inside(src, dst.n * 4) || !inside(dst.data, bytes_of(dst))) return outside("from_f32 range");
  return gcc::host_memory().from_f32(src, dst);
}

gc::status simulated_device_memory::accumulate(gc::const_tensor_view v, float alpha_lo,
                                               float alpha_hi, std::uint64_t split, float* acc) {
  if (!inside(v.data, bytes_of(v)) || !inside(acc, v.n * 4)) return outside("accumulate range");
  return gcc::host_memory().accumulate(v, alpha_lo, alpha_hi, split, acc);
}

gcc::memory_ops::host_copy_fn simulated_device_memory::detached_download() const noexcept {
  return checked_download;
}

// --- the communicator ------------------------------------------------------------------------

namespace {

std::uint64_t sum(std::span<const std::uint64_t> v) {
  std::uint64_t s = 0;
  for (auto x : v) s += x;
  return s;
}

}  // namespace

gc::status device_like_communicator::iallgatherv(const void* send, std::uint64_t send_bytes,
                                                 void* recv,
                                                 std::span<const std::uint64_t> recv_bytes,
                                                 gcc::request& req) {
  if (!simulated_device_memory::inside(send, send_bytes) ||
      !simulated_device_memory::inside(recv, sum(recv_bytes)))
    return outside("allgatherv buffer");
  return inner_->iallgatherv(send, send_bytes, recv, recv_bytes, req);
}

gc::status device_like_communicator::ialltoallv(const void* send,
                                                std::span<const std::uint64_t> send_bytes,
                                                void* recv,
                                                std::span<const std::uint64_t> recv_bytes,
                                                gcc::request& req) {
  if (!simulated_device_memory::inside(send, sum(send_bytes)) ||
      !simulated_device_memory::inside(recv, sum(recv_bytes)))
    return outside("alltoallv buffer");
  return inner_->ialltoallv(send, send_bytes, recv, recv_bytes, req);
}

gc::status device_like_communicator::iallreduce(const void* send, void* recv, std::uint64_t count,
                                                gcc::element_type type, gcc::reduce_op op,
                                                gcc::request& req) {
  const std::uint64_t bytes = count * gcc::element_size(type);
  if (!simulated_device_memory::inside(send, bytes) ||
      !simulated_device_memory::inside(recv, bytes))
    return outside("allreduce buffer");
  return inner_->iallreduce(send, recv, count, type, op, req);
}

gc::status device_like_communicator::ibroadcast(void* buf, std::uint64_t bytes, int root,
                                                gcc::request& req) {
  if (!simulated_device_memory::inside(buf, bytes)) return outside("broadcast buffer");
  return inner_->ibroadcast(buf, bytes, root, req);
}

gc::status device_like_communicator::split(int color, int key,
                                           std::unique_ptr<gcc::communicator>& out) {
  std::unique_ptr<gcc::communicator> child;
  if (auto st = inner_->split(color, key, child); !st.ok()) return st;
  out = child ? std::make_unique<device_like_communicator>(std::move(child)) : nullptr;
  return {};
}

std::vector<rank_result> simulate_on_device(const scenario& sc, int world) {
  std::vector<rank_result> results(static_cast<std::size_t>(world));
  auto statuses = gcc::run_threads(world, [&](gcc::communicator& c) {
    device_like_communicator dev(c);
    results[static_cast<std::size_t>(c.rank())] = run_scenario(dev, sc);
    return results[static_cast<std::size_t>(c.rank())].st;
  });
  return results;
}

}  // namespace comm_test
