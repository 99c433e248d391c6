// SPDX-License-Identifier: Apache-2.0
//! @file
//! The communicator base: names, blocking calls as post-then-wait, and the hierarchy split.
#include "gradcodec/comm/communicator.hpp"

#include <vector>

namespace gradcodec::comm {

std::string_view element_name(element_type t) noexcept {
  switch (t) {
    case element_type::u8: return "u8";
    case element_type::i32: return "i32";
    case element_type::u32: return "u32";
    case element_type::i64: return "i64";
    case element_type::u64: return "u64";
    case element_type::f32: return "f32";
    case element_type::f64: return "f64";
  }
  return "?";
}

std::string_view reduce_op_name(reduce_op op) noexcept {
  switch (op) {
    case reduce_op::sum: return "sum";
    case reduce_op::max: return "max";
    case reduce_op::min: return "min";
  }
  return "?";
}

status communicator::check_allgatherv(std::uint64_t send_bytes,
                                      std::span<const std::uint64_t> recv_bytes) const {
  if (recv_bytes.size() != static_cast<std::size_t>(size()))
    return {status_code::invalid_argument, "allgatherv: recv_bytes needs one entry per rank"};
  if (recv_bytes[static_cast<std::size_t>(rank())] != send_bytes)
    return {status_code::invalid_argument,
            "allgatherv: send_bytes differs from this rank's recv_bytes entry"};
  return {};
}

status communicator::wait_all(std::span<request> reqs) {
  status first;
  for (request& r : reqs) {
    status st = wait(r);
    if (first.ok() && !st.ok()) first = st;
  }
  return first;
}

status communicator::iallgather(const void* send, std::uint64_t send_bytes, void* recv,
                                request& req) {
  const std::vector<std::uint64_t> sizes(static_cast<std::size_t>(size()), send_bytes);
  return iallgatherv(send, send_bytes, recv, sizes, req);
}

status communicator::allgather(const void* send, std::uint64_t send_bytes, void* recv) {
  request r;
  if (auto st = iallgather(send, send_bytes, recv, r); !st.ok()) return st;
  return wait(r);
}

status communicator::allgatherv(const void* send, std::uint64_t send_bytes, void* recv,
                                std::span<const std::uint64_t> recv_bytes) {
  request r;
  if (auto st = iallgatherv(send, send_bytes, recv, recv_bytes, r); !st.ok()) return st;
  return wait(r);
}

status communicator::alltoallv(const void* send, std::span<const std::uint64_t> send_bytes,
                               void* recv, std::span<const std::uint64_t> recv_bytes) {
  request r;
  if (auto st = ialltoallv(send, send_bytes, recv, recv_bytes, r); !st.ok()) return st;
  return wait(r);
}

status communicator::allreduce(const void* send, void* recv, std::uint64_t count, element_type type,
                               reduce_op op) {
  request r;
  if (auto st = iallreduce(send, recv, count, type, op, r); !st.ok()) return st;
  return wait(r);
}

status communicator::broadcast(void* buf, std::uint64_t bytes, int root) {
  request r;
  if (auto st = ibroadcast(buf, bytes, root, r); !st.ok()) return st;
  return wait(r);
}

status make_hierarchy(communicator& world, int node_color, hierarchy& out) {
  out = hierarchy{};
  out.world = &world;
  if (node_color < 0) {
    // Still take part in both collective splits so the other ranks do not hang.
    std::unique_ptr<communicator> none;
    (void)world.split(-1, world.rank(), none);
    (void)world.split(-1, world.rank(), none);
    return {status_code::invalid_argument, "make_hierarchy: node_color must be >= 0"};
  }
  if (auto st = world.split(node_color, world.rank(), out.intra); !st.ok()) return st;
  const bool leader = out.intra != nullptr && out.intra->rank() == 0;
  if (auto st = world.split(leader ? 0 : -1, world.rank(), out.inter); !st.ok()) return st;
  if (out.intra == nullptr || (leader && out.inter == nullptr))
    return {status_code::comm_error, "make_hierarchy: split returned no communicator"};
  return {};
}

}  // namespace gradcodec::comm
