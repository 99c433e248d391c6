// SPDX-License-Identifier: Apache-2.0
//! @file
//! The strategy layer's memory: a growing buffer in a communicator's memory, and the
//! buffers of one in-flight segment (a slot). The workspace that keeps them, and each
//! strategy's own, is workspace.hpp.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "gradcodec/comm/allreduce.hpp"
#include "gradcodec/powersgd.hpp"

namespace gradcodec::comm::detail {

//! A 64-byte aligned buffer in a communicator's memory that only grows; new bytes are
//! zero, old contents are not kept. It is remade when asked for in another memory.
class buffer {
 public:
  //! Throws std::bad_alloc when the memory has no room, as host allocation does.
  std::byte* reserve(std::size_t bytes, memory_ops& m);
  [[nodiscard]] std::byte* data() const noexcept { return p_.get(); }
  [[nodiscard]] std::size_t size() const noexcept { return size_; }
  void release() noexcept {
    p_.reset();
    size_ = 0;
  }
  template <class T>
  T* as(std::size_t count, memory_ops& m) {
    return reinterpret_cast<T*>(reserve(count * sizeof(T), m));
  }

 private:
  memory_ops::block p_;
  std::size_t size_ = 0;
  memory_space space_ = memory_space::host;
  int device_ = -1;
};

//! One decode of a received frame into `out`: plain, or accumulating with r.alpha.
struct frame_decode {
  const_bytes frame;
  tensor_view out;
  bool accumulate;
};

//! Buffers of one in-flight segment of the pipeline.
struct slot {
  buffer send, recv, server_send, server_recv, frame;
  buffer headers;  // header exchanges of variable-size frames (the communicator's memory)
  std::vector<std::uint64_t> send_sizes, recv_sizes, server_sizes;
  std::vector<std::uint64_t> offsets, lengths;  // where the received frames are
  std::vector<std::uint64_t> caps;              // each received block's frame capacity
  std::vector<std::uint64_t> announced;         // frame bytes this rank sends per destination
  std::vector<std::uint64_t> frame_bytes;       // variable size: frame bytes of each received block
  std::vector<frame_header> expected;           // device memory: the received frames' headers
  request req;
};

}  // namespace gradcodec::comm::detail

namespace gradcodec::comm {

//! The arrays of a device-resident state (allreduce_state::device).
struct device_arrays {
  memory_ops::block worker, server, q;
  state_lengths n;
  int device = -1;
  memory_ops::host_copy_fn download = nullptr;
};

}  // namespace gradcodec::comm
