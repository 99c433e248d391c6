// SPDX-License-Identifier: Apache-2.0
//! @file
//! comm::communicator over MPI. Byte counts become MPI int counts of a contiguous block
//! type (the largest power of two up to 64 KiB dividing every count and displacement), so
//! messages beyond 2^31 bytes work as long as they are multiples of a large enough block.
#include "gradcodec/comm/mpi.hpp"

#include <algorithm>
#include <bit>
#include <climits>
#include <string>
#include <thread>

namespace gradcodec::comm {

namespace {

status mpi_error(int code, std::string_view call) {
  char text[MPI_MAX_ERROR_STRING] = {};
  int len = 0;
  if (MPI_Error_string(code, text, &len) != MPI_SUCCESS) len = 0;
  return {status_code::comm_error,
          std::string(call).append(": ").append(text, static_cast<std::size_t>(len))};
}

status too_large(std::string_view call) {
  return {status_code::comm_error,
          std::string(call).append(
              ": counts do not fit MPI's int counts (no common block size divides them)")};
}

MPI_Datatype mpi_type(element_type t) {
  switch (t) {
    case element_type::u8: return MPI_UINT8_T;
    case element_type::i32: return MPI_INT32_T;
    case element_type::u32: return MPI_UINT32_T;
    case element_type::i64: return MPI_INT64_T;
    case element_type::u64: return MPI_UINT64_T;
    case element_type::f32: return MPI_FLOAT;
    case element_type::f64: return MPI_DOUBLE;
  }
  return MPI_DATATYPE_NULL;
}

MPI_Op mpi_op(reduce_op op) {
  switch (op) {
    case reduce_op::sum: return MPI_SUM;
    case reduce_op::max: return MPI_MAX;
    case reduce_op::min: return MPI_MIN;
  }
  return MPI_OP_NULL;
}

//! The block size (a power of two, at most 2^16) dividing every value, and whether every
//! value then fits an int count. Plain bytes when everything fits already.
struct unit_plan {
  std::uint64_t unit = 1;
  bool fits = true;
};

unit_plan plan_units(std::uint64_t any_bits, std::uint64_t largest) {
  unit_plan p;
  if (largest <= static_cast<std::uint64_t>(INT_MAX)) return p;
  const int tz = any_bits == 0 ? 16 : std::min(std::countr_zero(any_bits), 16);
  p.unit = std::uint64_t{1} << tz;
  p.fits = largest / p.unit <= static_cast<std::uint64_t>(INT_MAX);
  return p;
}

//! counts and displacements (packed, in order) in units.
void to_counts(std::span<const std::uint64_t> bytes, std::uint64_t unit, std::vector<int>& counts,
               std::vector<int>& displs) {
  counts.resize(bytes.size());
  displs.resize(bytes.size());
  std::uint64_t at = 0;
  for (std::size_t i = 0; i < bytes.size(); ++i) {
    counts[i] = static_cast<int>(bytes[i] / unit);
    displs[i] = static_cast<int>(at / unit);
    at += bytes[i];
  }
}

//! OR of every size and running offset (for the block size) and the largest of them.
void scan(std::span<const std::uint64_t> bytes, std::uint64_t& bits, std::uint64_t& largest) {
  std::uint64_t at = 0;
  for (std::uint64_t b : bytes) {
    bits |= b | at;
    largest = std::max({largest, b, at});
    at += b;
  }
}

}  // namespace

struct mpi_communicator::pending {
  std::uint64_t id = 0;
  MPI_Request req = MPI_REQUEST_NULL;
  std::vector<int> send_counts, send_displs, recv_counts, recv_displs;  // live until completion
};

status mpi_communicator::create(MPI_Comm comm, std::unique_ptr<mpi_communicator>& out) {
  out.reset();
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) return {status_code::comm_error, "mpi_communicator: MPI is not initialized"};
  MPI_Comm dup = MPI_COMM_NULL;
  if (int rc = MPI_Comm_dup(comm, &dup); rc != MPI_SUCCESS) return mpi_error(rc, "MPI_Comm_dup");
  if (int rc = MPI_Comm_set_errhandler(dup, MPI_ERRORS_RETURN); rc != MPI_SUCCESS) {
    MPI_Comm_free(&dup);
    return mpi_error(rc, "MPI_Comm_set_errhandler");
  }
  out.reset(new mpi_communicator(dup));
  return {};
}

mpi_communicator::mpi_communicator(MPI_Comm dup) : comm_(dup) {
  MPI_Comm_rank(comm_, &rank_);
  MPI_Comm_size(comm_, &size_);
}

mpi_communicator::~mpi_communicator() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  for (auto& p : pending_) MPI_Wait(&p.req, MPI_STATUS_IGNORE);
  for (auto& t : types_) MPI_Type_free(&t.second);
  if (comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
}

status mpi_communicator::datatype(std::uint64_t unit, MPI_Datatype& out) {
  if (unit == 1) {
    out = MPI_BYTE;
    return {};
  }
  for (auto& t : types_)
    if (t.first == unit) {
      out = t.second;
      return {};
    }
  MPI_Datatype t = MPI_DATATYPE_NULL;
  if (int rc = MPI_Type_contiguous(static_cast<int>(unit), MPI_BYTE, &t); rc != MPI_SUCCESS)
    return mpi_error(rc, "MPI_Type_contiguous");
  if (int rc = MPI_Type_commit(&t); rc != MPI_SUCCESS) return mpi_error(rc, "MPI_Type_commit");
  types_.emplace_back(unit, t);
  out = t;
  return {};
}

status mpi_communicator::post(pending&& p, request& req) {
  p.id = next_id_++;
  req = request{p.id};
  pending_.push_back(std::move(p));
  return {};
}

status mpi_communicator::iallgather(const void* send, std::uint64_t send_bytes, void* recv,
                                    request& req) {
  req = request{};
  std::uint64_t bits = send_bytes, largest = send_bytes;
  const unit_plan u = plan_units(bits, largest);
  if (!u.fits) return too_large("MPI_Iallgather");
  MPI_Datatype t;
  if (auto st = datatype(u.unit, t); !st.ok()) return st;
  pending p;
  const int count = static_cast<int>(send_bytes / u.unit);
  if (int rc = MPI_Iallgather(send, count, t, recv, count, t, comm_, &p.req); rc != MPI_SUCCESS)
    return mpi_error(rc, "MPI_Iallgather");
  return post(std::move(p), req);
}

status mpi_communicator::iallgatherv(const void* send, std::uint64_t send_bytes, void* recv,
                                     std::span<const std::uint64_t> recv_bytes, request& req) {
  req = request{};
  if (auto st = check_allgatherv(send_bytes, recv_bytes); !st.ok()) return st;
  std::uint64_t bits = 0, largest = 0;
  scan(recv_bytes, bits, largest);
  const unit_plan u = plan_units(bits, largest);
  if (!u.fits) return too_large("MPI_Iallgatherv");
  MPI_Datatype t;
  if (auto st = datatype(u.unit, t); !st.ok()) return st;
  pending p;
  to_counts(recv_bytes, u.unit, p.recv_counts, p.recv_displs);
  if (int rc = MPI_Iallgatherv(send, static_cast<int>(send_bytes / u.unit), t, recv,
                               p.recv_counts.data(), p.recv_displs.data(), t, comm_, &p.req);
      rc != MPI_SUCCESS)
    return mpi_error(rc, "MPI_Iallgatherv");
  return post(std::move(p), req);
}

status mpi_communicator::ialltoallv(const void* send, std::span<const std::uint64_t> send_bytes,
                                    void* recv, std::span<const std::uint64_t> recv_bytes,
                                    request& req) {
  req = request{};
  if (send_bytes.size() != static_cast<std::size_t>(size_) ||
      recv_bytes.size() != static_cast<std::size_t>(size_))
    return {status_code::invalid_argument, "alltoallv: size spans need one entry per rank"};
  std::uint64_t bits = 0, largest = 0;
  scan(send_bytes, bits, largest);
  scan(recv_bytes, bits, largest);
  const unit_plan u = plan_units(bits, largest);
  if (!u.fits) return too_large("MPI_Ialltoallv");
  MPI_Datatype t;
  if (auto st = datatype(u.unit, t); !st.ok()) return st;
  pending p;
  to_counts(send_bytes, u.unit, p.send_counts, p.send_displs);
  to_counts(recv_bytes, u.unit, p.recv_counts, p.recv_displs);
  if (int rc = MPI_Ialltoallv(send, p.send_counts.data(), p.send_displs.data(), t, recv,
                              p.recv_counts.data(), p.recv_displs.data(), t, comm_, &p.req);
      rc != MPI_SUCCESS)
    return mpi_error(rc, "MPI_Ialltoallv");
  return post(std::move(p), req);
}

status mpi_communicator::iallreduce(const void* send, void* recv, std::uint64_t count,
                                    element_type type, reduce_op op, request& req) {
  req = request{};
  if (count > static_cast<std::uint64_t>(INT_MAX)) return too_large("MPI_Iallreduce");
  pending p;
  const void* src = send == recv ? MPI_IN_PLACE : send;
  if (int rc = MPI_Iallreduce(src, recv, static_cast<int>(count), mpi_type(type), mpi_op(op), comm_,
                              &p.req);
      rc != MPI_SUCCESS)
    return mpi_error(rc, "MPI_Iallreduce");
  return post(std::move(p), req);
}

status mpi_communicator::ibroadcast(void* buf, std::uint64_t bytes, int root, request& req) {
  req = request{};
  if (root < 0 || root >= size_)
    return {status_code::invalid_argument, "broadcast: root out of range"};
  const unit_plan u = plan_units(bytes, bytes);
  if (!u.fits) return too_large("MPI_Ibcast");
  MPI_Datatype t;
  if (auto st = datatype(u.unit, t); !st.ok()) return st;
  pending p;
  if (int rc = MPI_Ibcast(buf, static_cast<int>(bytes / u.unit), t, root, comm_, &p.req);
      rc != MPI_SUCCESS)
    return mpi_error(rc, "MPI_Ibcast");
  return post(std::move(p), req);
}

status mpi_communicator::wait(request& req) {
  if (!req.active()) return {};
  const std::uint64_t id = req.id();
  req = request{};
  auto it =
      std::find_if(pending_.begin(), pending_.end(), [id](const pending& p) { return p.id == id; });
  if (it == pending_.end())
    return {status_code::invalid_argument, "wait: unknown or completed request"};
  int rc = MPI_SUCCESS;
  if (wait_poll_.count() == 0) {
    rc = MPI_Wait(&it->req, MPI_STATUS_IGNORE);
  } else {
    int done = 0;
    while ((rc = MPI_Test(&it->req, &done, MPI_STATUS_IGNORE)) == MPI_SUCCESS && done == 0)
      std::this_thread::sleep_for(wait_poll_);
  }
  pending_.erase(it);
  if (rc != MPI_SUCCESS) return mpi_error(rc, wait_poll_.count() == 0 ? "MPI_Wait" : "MPI_Test");
  return {};
}

status mpi_communicator::barrier() {
  if (int rc = MPI_Barrier(comm_); rc != MPI_SUCCESS) return mpi_error(rc, "MPI_Barrier");
  return {};
}

status mpi_communicator::split(int color, int key, std::unique_ptr<communicator>& out) {
  out.reset();
  MPI_Comm sub = MPI_COMM_NULL;
  if (int rc = MPI_Comm_split(comm_, color < 0 ? MPI_UNDEFINED : color, key, &sub);
      rc != MPI_SUCCESS)
    return mpi_error(rc, "MPI_Comm_split");
  if (sub == MPI_COMM_NULL) return {};
  if (int rc = MPI_Comm_set_errhandler(sub, MPI_ERRORS_RETURN); rc != MPI_SUCCESS) {
    MPI_Comm_free(&sub);
    return mpi_error(rc, "MPI_Comm_set_errhandler");
  }
  out.reset(new mpi_communicator(sub));
  return {};
}

status mpi_communicator::node_color(int& color) {
  MPI_Comm shared = MPI_COMM_NULL;
  if (int rc = MPI_Comm_split_type(comm_, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &shared);
      rc != MPI_SUCCESS)
    return mpi_error(rc, "MPI_Comm_split_type");
  MPI_Comm_set_errhandler(shared, MPI_ERRORS_RETURN);
  int lowest = rank_;
  const int rc = MPI_Allreduce(&rank_, &lowest, 1, MPI_INT, MPI_MIN, shared);
  MPI_Comm_free(&shared);
  if (rc != MPI_SUCCESS) return mpi_error(rc, "MPI_Allreduce");
  color = lowest;
  return {};
}

}  // namespace gradcodec::comm
