// SPDX-License-Identifier: Apache-2.0
//! @file
//! The recording communicator: forward, remember the shapes, replay them.
#include "recording_communicator.hpp"

#include <algorithm>
#include <numeric>

namespace gradcodec::tool {

namespace {

std::uint64_t total(std::span<const std::uint64_t> sizes) {
  return std::accumulate(sizes.begin(), sizes.end(), std::uint64_t{0});
}

}  // namespace

status recording_communicator::iallgatherv(const void* send, std::uint64_t send_bytes, void* recv,
                                           std::span<const std::uint64_t> recv_bytes,
                                           comm::request& req) {
  if (recording_) {
    collective_call c;
    c.what = collective_call::kind::allgatherv;
    c.send_bytes = send_bytes;
    c.recv_sizes.assign(recv_bytes.begin(), recv_bytes.end());
    calls_.push_back(std::move(c));
  }
  return inner_.iallgatherv(send, send_bytes, recv, recv_bytes, req);
}

status recording_communicator::ialltoallv(const void* send,
                                          std::span<const std::uint64_t> send_bytes, void* recv,
                                          std::span<const std::uint64_t> recv_bytes,
                                          comm::request& req) {
  if (recording_) {
    collective_call c;
    c.what = collective_call::kind::alltoallv;
    c.send_sizes.assign(send_bytes.begin(), send_bytes.end());
    c.recv_sizes.assign(recv_bytes.begin(), recv_bytes.end());
    calls_.push_back(std::move(c));
  }
  return inner_.ialltoallv(send, send_bytes, recv, recv_bytes, req);
}

status recording_communicator::iallreduce(const void* send, void* recv, std::uint64_t count,
                                          comm::element_type type, comm::reduce_op op,
                                          comm::request& req) {
  if (recording_) {
    collective_call c;
    c.what = collective_call::kind::allreduce;
    c.count = count;
    c.type = type;
    c.op = op;
    c.send_bytes = count * comm::element_size(type);
    calls_.push_back(std::move(c));
  }
  return inner_.iallreduce(send, recv, count, type, op, req);
}

status recording_communicator::ibroadcast(void* buf, std::uint64_t bytes, int root,
                                          comm::request& req) {
  if (recording_) {
    collective_call c;
    c.what = collective_call::kind::broadcast;
    c.send_bytes = bytes;
    c.root = root;
    calls_.push_back(std::move(c));
  }
  return inner_.ibroadcast(buf, bytes, root, req);
}

status recording_communicator::replay(std::span<const collective_call> calls) {
  std::uint64_t send_need = 1, recv_need = 1;
  for (const auto& c : calls) {
    switch (c.what) {
      case collective_call::kind::allgatherv:
        send_need = std::max(send_need, c.send_bytes);
        recv_need = std::max(recv_need, total(c.recv_sizes));
        break;
      case collective_call::kind::alltoallv:
        send_need = std::max(send_need, total(c.send_sizes));
        recv_need = std::max(recv_need, total(c.recv_sizes));
        break;
      case collective_call::kind::allreduce:
      case collective_call::kind::broadcast:
        send_need = std::max(send_need, c.send_bytes);
        recv_need = std::max(recv_need, c.send_bytes);
        break;
    }
  }
  if (send_scratch_.size() < send_need) send_scratch_.resize(send_need);
  if (recv_scratch_.size() < recv_need) recv_scratch_.resize(recv_need);
  std::byte* send = send_scratch_.data();
  std::byte* recv = recv_scratch_.data();
  for (const auto& c : calls) {
    status st;
    switch (c.what) {
      case collective_call::kind::allgatherv:
        st = inner_.allgatherv(send, c.send_bytes, recv, c.recv_sizes);
        break;
      case collective_call::kind::alltoallv:
        st = inner_.alltoallv(send, c.send_sizes, recv, c.recv_sizes);
        break;
      case collective_call::kind::allreduce:
        // Zeros reduce to zeros whatever the type and operation.
        std::fill_n(send, c.send_bytes, std::byte{0});
        st = inner_.allreduce(send, recv, c.count, c.type, c.op);
        break;
      case collective_call::kind::broadcast:
        st = inner_.broadcast(recv, c.send_bytes, c.root);
        break;
    }
    if (!st.ok()) return st;
  }
  return {};
}

std::uint64_t wire_bytes(std::span<const collective_call> calls, int rank, int size) noexcept {
  const auto me = static_cast<std::size_t>(rank);
  const auto peers = static_cast<std::uint64_t>(size > 0 ? size - 1 : 0);
  std::uint64_t bytes = 0;
  for (const auto& c : calls) {
    switch (c.what) {
      case collective_call::kind::allgatherv: bytes += peers * c.send_bytes; break;
      case collective_call::kind::alltoallv:
        for (std::size_t d = 0; d < c.send_sizes.size(); ++d)
          if (d != me) bytes += c.send_sizes[d];
        break;
      case collective_call::kind::allreduce:
        if (size > 1) bytes += 2 * peers * c.send_bytes / static_cast<std::uint64_t>(size);
        break;
      case collective_call::kind::broadcast:
        if (c.root == rank) bytes += c.send_bytes;
        break;
    }
  }
  return bytes;
}

}  // namespace gradcodec::tool
