// SPDX-License-Identifier: Apache-2.0
//! @file
//! comm::communicator over NCCL: stream-ordered collectives, event-backed requests, and
//! asynchronous NCCL errors surfaced while waiting.
#include "gradcodec/comm/nccl.hpp"

#include <algorithm>
#include <string>
#include <thread>

#include "comm/src/transports/cuda_device_scope.hpp"
#if defined(GRADCODEC_NCCL_DEVICE_MEMORY)
#include "comm/src/transports/cuda_memory.hpp"
#endif

namespace gradcodec::comm {

namespace {

status cuda_failed(cudaError_t e, std::string_view call) {
  return {status_code::device_error, std::string(call).append(": ").append(cudaGetErrorString(e))};
}

ncclDataType_t nccl_type(element_type t) {
  switch (t) {
    case element_type::u8: return ncclUint8;
    case element_type::i32: return ncclInt32;
    case element_type::u32: return ncclUint32;
    case element_type::i64: return ncclInt64;
    case element_type::u64: return ncclUint64;
    case element_type::f32: return ncclFloat32;
    case element_type::f64: return ncclFloat64;
  }
  return ncclUint8;
}

ncclRedOp_t nccl_op(reduce_op op) {
  switch (op) {
    case reduce_op::sum: return ncclSum;
    case reduce_op::max: return ncclMax;
    case reduce_op::min: return ncclMin;
  }
  return ncclSum;
}

const std::byte* at(const void* p, std::uint64_t off) {
  return static_cast<const std::byte*>(p) + off;
}
std::byte* at(void* p, std::uint64_t off) { return static_cast<std::byte*>(p) + off; }

//! NCCL takes at most 2048 operations between ncclGroupStart and ncclGroupEnd; half of it
//! leaves room for a caller's enclosing group.
constexpr int max_group_ops = 1024;

//! Waits until `comm` is no longer in progress (a non-blocking communicator's enqueue, group
//! end or split returns ncclInProgress: NCCL's documented way on is to poll its
//! asynchronous state); the call's own result otherwise.
ncclResult_t settled(ncclComm_t comm, ncclResult_t r) {
  while (r == ncclInProgress) {
    ncclResult_t state = ncclSuccess;
    if (ncclResult_t q = ncclCommGetAsyncError(comm, &state); q != ncclSuccess) return q;
    r = state;
    if (r == ncclInProgress) std::this_thread::yield();
  }
  return r;
}

}  // namespace

status nccl_communicator::nccl_failed(ncclResult_t r, std::string_view call) const {
  std::string m = std::string(call).append(": ").append(ncclGetErrorString(r));
  if (const char* last = comm_ ? ncclGetLastError(comm_) : nullptr;
      last != nullptr && *last != '\0')
    m.append(" (").append(last).append(")");
  return {status_code::comm_error, m};
}

status nccl_communicator::create(ncclComm_t comm, cudaStream_t stream, bool owned,
                                 std::unique_ptr<nccl_communicator>& out) {
  out.reset();
  if (comm == nullptr)
    return {status_code::invalid_argument, "nccl_communicator: null communicator"};
  // Not owned until every check passed: a failed create leaves comm to the caller.
  std::unique_ptr<nccl_communicator> c(new nccl_communicator(comm, stream, false));
  if (ncclResult_t r = ncclCommUserRank(comm, &c->rank_); r != ncclSuccess)
    return c->nccl_failed(r, "ncclCommUserRank");
  if (ncclResult_t r = ncclCommCount(comm, &c->size_); r != ncclSuccess)
    return c->nccl_failed(r, "ncclCommCount");
  if (ncclResult_t r = ncclCommCuDevice(comm, &c->device_); r != ncclSuccess)
    return c->nccl_failed(r, "ncclCommCuDevice");
  {
    const detail::device_scope on(c->device_);  // the scratch lives on comm's device
    if (cudaError_t e = cudaMalloc(&c->scratch_, 4); e != cudaSuccess)
      return cuda_failed(e, "cudaMalloc");
  }
#if defined(GRADCODEC_NCCL_DEVICE_MEMORY)
  // The buffer services wait like wait() does: polling, with asynchronous errors seen.
  c->memory_ =
      std::make_unique<detail::cuda_memory>(stream, c->device_, [raw = c.get()]() -> status {
        request req;
        if (auto st = raw->track(req); !st.ok()) return st;
        return raw->wait(req);
      });
#endif
  c->owned_ = owned;
  out = std::move(c);
  return {};
}

nccl_communicator::nccl_communicator(ncclComm_t comm, cudaStream_t stream, bool owned)
    : comm_(comm), stream_(stream), owned_(owned) {}

nccl_communicator::~nccl_communicator() {
  // Outstanding work may still read or write the caller's buffers: let it finish (unless
  // the communicator failed: a borrowed one is not aborted, its kernels may never end).
  for (auto& p : pending_) {
    if (broken_.ok()) (void)cudaEventSynchronize(p.second);
    (void)cudaEventDestroy(p.second);
  }
  for (cudaEvent_t e : spare_) (void)cudaEventDestroy(e);
  // cudaFree waits for the device: a broken borrowed comm's kernels may spin until its
  // owner aborts it, so its 4 bytes are left behind rather than risk that wait.
  if (scratch_ != nullptr && (broken_.ok() || owned_)) (void)cudaFree(scratch_);
  if (owned_ && comm_ != nullptr) (void)ncclCommDestroy(comm_);
}

status nccl_communicator::track(request& req) {
  // Events belong to the device current at their creation and must be recorded on a stream
  // of that device: comm's.
  const detail::device_scope on(device_);
  cudaEvent_t ev = nullptr;
  if (!spare_.empty()) {
    ev = spare_.back();
    spare_.pop_back();
  } else if (cudaError_t e = cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);
             e != cudaSuccess) {
    return cuda_failed(e, "cudaEventCreateWithFlags");
  }
  if (cudaError_t e = cudaEventRecord(ev, stream_); e != cudaSuccess) {
    spare_.push_back(ev);
    return cuda_failed(e, "cudaEventRecord");
  }
  const std::uint64_t id = next_id_++;
  pending_.emplace_back(id, ev);
  req = request{id};
  return {};
}

status nccl_communicator::iallgather(const void* send, std::uint64_t send_bytes, void* recv,
                                     request& req) {
  req = request{};
  if (!broken_.ok()) return broken_;
  if (send_bytes == 0) return track(req);  // nothing to move: NCCL is not asked
  if (ncclResult_t r =
          settled(comm_, ncclAllGather(send, recv, send_bytes, ncclUint8, comm_, stream_));
      r != ncclSuccess)
    return nccl_failed(r, "ncclAllGather");
  return track(req);
}

status nccl_communicator::iallgatherv(const void* send, std::uint64_t send_bytes, void* recv,
                                      std::span<const std::uint64_t> recv_bytes, request& req) {
  req = request{};
  if (!broken_.ok()) return broken_;
  if (auto st = check_allgatherv(send_bytes, recv_bytes); !st.ok()) return st;
  // One broadcast per rank with bytes, in groups of at most max_group_ops: every rank has
  // the same recv_bytes, so every rank closes its groups after the same broadcasts.
  std::uint64_t off = 0;
  int root = 0;
  while (root < size_) {
    if (ncclResult_t r = ncclGroupStart(); r != ncclSuccess)
      return nccl_failed(r, "ncclGroupStart");
    ncclResult_t first = ncclSuccess;
    for (int ops = 0; root < size_ && ops < max_group_ops; ++root) {
      const std::uint64_t b = recv_bytes[static_cast<std::size_t>(root)];
      if (b > 0 && first == ncclSuccess) {
        first = ncclBroadcast(root == rank_ ? send : at(recv, off), at(recv, off), b, ncclUint8,
                              root, comm_, stream_);
        ++ops;
      }
      off += b;
    }
    const ncclResult_t end = settled(comm_, ncclGroupEnd());
    if (first != ncclSuccess) return nccl_failed(first, "ncclBroadcast");
    if (end != ncclSuccess) return nccl_failed(end, "ncclGroupEnd");
  }
  return track(req);
}

status nccl_communicator::ialltoallv(const void* send, std::span<const std::uint64_t> send_bytes,
                                     void* recv, std::span<const std::uint64_t> recv_bytes,
                                     request& req) {
  req = request{};
  if (!broken_.ok()) return broken_;
  const auto w = static_cast<std::size_t>(size_);
  if (send_bytes.size() != w || recv_bytes.size() != w)
    return {status_code::invalid_argument, "alltoallv: size spans need one entry per rank"};
  const auto me = static_cast<std::size_t>(rank_);
  if (send_bytes[me] != recv_bytes[me])
    return {status_code::invalid_argument,
            "alltoallv: this rank's block to itself differs in size"};
  std::uint64_t self_from = 0, self_to = 0;
  for (std::size_t p = 0; p < me; ++p) {
    self_from += send_bytes[p];
    self_to += recv_bytes[p];
  }
  if (send_bytes[me] > 0)
    if (cudaError_t e = cudaMemcpyAsync(at(recv, self_to), at(send, self_from), send_bytes[me],
                                        cudaMemcpyDeviceToDevice, stream_);
        e != cudaSuccess)
      return cuda_failed(e, "cudaMemcpyAsync");
  if (ncclResult_t r = ncclGroupStart(); r != ncclSuccess) return nccl_failed(r, "ncclGroupStart");
  ncclResult_t first = ncclSuccess;
  std::uint64_t soff = 0, roff = 0;
  for (std::size_t p = 0; p < w; ++p) {
    if (p != me && first == ncclSuccess) {
      const int peer = static_cast<int>(p);
      if (send_bytes[p] > 0)
        first = ncclSend(at(send, soff), send_bytes[p], ncclUint8, peer, comm_, stream_);
      if (first == ncclSuccess && recv_bytes[p] > 0)
        first = ncclRecv(at(recv, roff), recv_bytes[p], ncclUint8, peer, comm_, stream_);
    }
    soff += send_bytes[p];
    roff += recv_bytes[p];
  }
  const ncclResult_t end = settled(comm_, ncclGroupEnd());
  if (first != ncclSuccess) return nccl_failed(first, "ncclSend/ncclRecv");
  if (end != ncclSuccess) return nccl_failed(end, "ncclGroupEnd");
  return track(req);
}

status nccl_communicator::iallreduce(const void* send, void* recv, std::uint64_t count,
                                     element_type type, reduce_op op, request& req) {
  req = request{};
  if (!broken_.ok()) return broken_;
  if (count == 0) return track(req);
  if (ncclResult_t r = settled(
          comm_, ncclAllReduce(send, recv, count, nccl_type(type), nccl_op(op), comm_, stream_));
      r != ncclSuccess)
    return nccl_failed(r, "ncclAllReduce");
  return track(req);
}

status nccl_communicator::ibroadcast(void* buf, std::uint64_t bytes, int root, request& req) {
  req = request{};
  if (!broken_.ok()) return broken_;
  if (root < 0 || root >= size_)
    return {status_code::invalid_argument, "broadcast: root out of range"};
  if (bytes == 0) return track(req);
  if (ncclResult_t r =
          settled(comm_, ncclBroadcast(buf, buf, bytes, ncclUint8, root, comm_, stream_));
      r != ncclSuccess)
    return nccl_failed(r, "ncclBroadcast");
  return track(req);
}

status nccl_communicator::wait(request& req) {
  if (!req.active()) return {};
  const std::uint64_t id = req.id();
  req = request{};
  auto it =
      std::find_if(pending_.begin(), pending_.end(), [id](const auto& p) { return p.first == id; });
  if (it == pending_.end())
    return {status_code::invalid_argument, "wait: unknown or completed request"};
  const cudaEvent_t ev = it->second;
  pending_.erase(it);
  if (!broken_.ok()) {  // its work may never complete: the event is not reused
    (void)cudaEventDestroy(ev);
    return broken_;
  }
  status result;
  // Poll rather than block: a peer that died leaves the kernel spinning, and only the
  // asynchronous error (then an abort) gets this rank out.
  for (;;) {
    const cudaError_t e = cudaEventQuery(ev);
    if (e == cudaSuccess) break;
    if (e != cudaErrorNotReady) {
      result = cuda_failed(e, "cudaEventQuery");
      break;
    }
    ncclResult_t async = ncclSuccess;
    if (ncclResult_t r = ncclCommGetAsyncError(comm_, &async); r != ncclSuccess) {
      broken_ = nccl_failed(r, "ncclCommGetAsyncError");  // its state is unknown now
      (void)cudaEventDestroy(ev);
      return broken_;
    }
    if (async != ncclSuccess && async != ncclInProgress) {
      // Every later call returns this error. An owned communicator is aborted here (its
      // kernels end); a borrowed one belongs to the caller, who must ncclCommAbort it.
      broken_ = nccl_failed(async, "NCCL asynchronous error");
      if (owned_) {
        (void)ncclCommAbort(comm_);
        comm_ = nullptr;
        owned_ = false;
      }
      (void)cudaEventDestroy(ev);
      return broken_;
    }
    std::this_thread::yield();
  }
  spare_.push_back(ev);
  return result;
}

status nccl_communicator::barrier() {
  request req;
  if (auto st = iallreduce(scratch_, scratch_, 1, element_type::i32, reduce_op::sum, req); !st.ok())
    return st;
  return wait(req);
}

status nccl_communicator::split(int color, int key, std::unique_ptr<communicator>& out) {
  out.reset();
  if (!broken_.ok()) return broken_;
  ncclComm_t sub = nullptr;
  ncclResult_t r = settled(
      comm_, ncclCommSplit(comm_, color < 0 ? NCCL_SPLIT_NOCOLOR : color, key, &sub, nullptr));
  // A non-blocking parent makes a non-blocking child, ready once its own state settles.
  if (r == ncclSuccess && sub != nullptr) r = settled(sub, ncclInProgress);
  if (r != ncclSuccess) {
    if (sub != nullptr) (void)ncclCommAbort(sub);
    return nccl_failed(r, "ncclCommSplit");
  }
  if (sub == nullptr) return {};
  std::unique_ptr<nccl_communicator> c;
  if (auto st = create(sub, stream_, true, c); !st.ok()) {
    (void)ncclCommDestroy(sub);
    return st;
  }
  out = std::move(c);
  return {};
}

}  // namespace gradcodec::comm
