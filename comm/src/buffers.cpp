// SPDX-License-Identifier: Apache-2.0
//! @file
//! The workspace and its buffers.
#include "comm/src/workspace.hpp"

#include <algorithm>
#include <new>

namespace gradcodec::comm {

workspace::workspace() : impl_(std::make_unique<impl>()) {}
workspace::~workspace() = default;
workspace::workspace(workspace&&) noexcept = default;
workspace& workspace::operator=(workspace&&) noexcept = default;

std::size_t workspace::bytes() const noexcept { return impl_ ? impl_->bytes() : 0; }

void workspace::release() noexcept {
  if (impl_) *impl_ = impl{};
}

std::size_t workspace::impl::bytes() const noexcept {
  std::size_t b = scratch.size() + accum.size() + prescaled.size() + words.size() +
                  verdicts.size() + host.capacity() + dense.send.size() + dense.recv.size() +
                  powersgd.values.size() + hierarchy.node.size() + hierarchy.node_word.size() +
                  hierarchy.staged.size() + tensors.flat.size();
  for (const auto& s : slots)
    b += s.send.size() + s.recv.size() + s.server_send.size() + s.server_recv.size() +
         s.frame.size() + s.headers.size();
  if (hierarchy.node_side) b += hierarchy.node_side->bytes();
  return b;
}

}  // namespace gradcodec::comm

namespace gradcodec::comm::detail {

std::byte* buffer::reserve(std::size_t bytes, memory_ops& m) {
  const bool same = space_ == m.space() && device_ == m.device();
  if (same && bytes <= size_ && p_) return p_.get();
  // Grow geometrically so a slowly growing need reallocates only a few times.
  const std::size_t want = std::max<std::size_t>({bytes, same ? size_ + size_ / 2 : 0, 64});
  release();
  p_ = m.allocate(want);
  if (!p_) throw std::bad_alloc();
  size_ = want;
  space_ = m.space();
  device_ = m.device();
  return p_.get();
}

}  // namespace gradcodec::comm::detail
