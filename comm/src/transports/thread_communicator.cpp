// SPDX-License-Identifier: Apache-2.0
//! @file
//! The shared-memory communicator: every collective is "post pointers, barrier, copy from
//! the other ranks' buffers, barrier". Reductions combine in rank order (deterministic).
#include "gradcodec/comm/thread_communicator.hpp"

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <exception>
#include <map>
#include <mutex>
#include <numeric>
#include <string>
#include <thread>

namespace gradcodec::comm {

namespace {
enum class op_kind : std::uint8_t { allgatherv, alltoallv, allreduce, broadcast, barrier, split };

std::string_view op_name(op_kind k) {
  switch (k) {
    case op_kind::allgatherv: return "allgatherv";
    case op_kind::alltoallv: return "alltoallv";
    case op_kind::allreduce: return "allreduce";
    case op_kind::broadcast: return "broadcast";
    case op_kind::barrier: return "barrier";
    case op_kind::split: return "split";
  }
  return "?";
}

status comm_err(std::string_view what) { return {status_code::comm_error, what}; }

std::string num(std::uint64_t v) { return std::to_string(v); }
}  // namespace

//! The state shared by the ranks of one group.
class thread_group {
 public:
  struct post {
    op_kind op = op_kind::barrier;
    std::uint64_t seq = 0;
    const void* send = nullptr;
    std::uint64_t bytes = 0;                // allgatherv/broadcast: bytes; allreduce: count
    const std::uint64_t* counts = nullptr;  // alltoallv: send sizes per destination
    element_type type = element_type::u8;
    reduce_op rop = reduce_op::sum;
    int root = 0, color = 0, key = 0;
  };

  thread_group(int size, std::chrono::milliseconds timeout)
      : size_(size), timeout_(timeout), posts_(static_cast<std::size_t>(size)) {}

  [[nodiscard]] int size() const { return size_; }
  post& slot(int rank) { return posts_[static_cast<std::size_t>(rank)]; }

  //! A barrier that gives up after the timeout and then breaks the group for everyone.
  status barrier() {
    std::unique_lock lock(m_);
    if (broken_) return comm_err(reason_);
    const std::uint64_t gen = generation_;
    if (++arrived_ == size_) {
      arrived_ = 0;
      ++generation_;
      cv_.notify_all();
      return {};
    }
    if (!cv_.wait_for(lock, timeout_, [&] { return generation_ != gen || broken_; })) {
      broken_ = true;
      reason_ = "thread group broken: a rank did not reach a collective within the timeout";
      cv_.notify_all();
    }
    if (generation_ == gen) return comm_err(reason_);
    return {};
  }

  void breaks(std::string_view why) {
    std::lock_guard lock(m_);
    if (!broken_) reason_ = std::string(why);
    broken_ = true;
    cv_.notify_all();
  }

  //! The group of one color of split number `seq`: the first member to ask creates it.
  std::shared_ptr<thread_group> joined(std::uint64_t seq, int color, int members) {
    std::lock_guard lock(reg_m_);
    auto& e = registry_[{seq, color}];
    if (!e.group) {
      e.group = std::make_shared<thread_group>(members, timeout_);
      e.remaining = members;
    }
    auto g = e.group;
    if (--e.remaining == 0) registry_.erase({seq, color});
    return g;
  }

 private:
  int size_;
  std::chrono::milliseconds timeout_;
  std::vector<post> posts_;
  std::mutex m_;
  std::condition_variable cv_;
  int arrived_ = 0;
  std::uint64_t generation_ = 0;
  bool broken_ = false;
  std::string reason_;

  struct entry {
    std::shared_ptr<thread_group> group;
    int remaining = 0;
  };
  std::mutex reg_m_;
  std::map<std::pair<std::uint64_t, int>, entry> registry_;
};

namespace {

template <class T>
void reduce_into(std::byte* acc, const std::byte* in, std::uint64_t count, reduce_op op) {
  for (std::uint64_t i = 0; i < count; ++i) {
    T a, b;
    std::memcpy(&a, acc + i * sizeof(T), sizeof(T));
    std::memcpy(&b, in + i * sizeof(T), sizeof(T));
    const T c = op == reduce_op::sum   ? static_cast<T>(a + b)
                : op == reduce_op::max ? std::max(a, b)
                                       : std::min(a, b);
    std::memcpy(acc + i * sizeof(T), &c, sizeof(T));
  }
}

void reduce_any(std::byte* acc, const std::byte* in, std::uint64_t count, element_type t,
                reduce_op op) {
  switch (t) {
    case element_type::u8: reduce_into<std::uint8_t>(acc, in, count, op); break;
    case element_type::i32: reduce_into<std::int32_t>(acc, in, count, op); break;
    case element_type::u32: reduce_into<std::uint32_t>(acc, in, count, op); break;
    case element_type::i64: reduce_into<std::int64_t>(acc, in, count, op); break;
    case element_type::u64: reduce_into<std::uint64_t>(acc, in, count, op); break;
    case element_type::f32: reduce_into<float>(acc, in, count, op); break;
    case element_type::f64: reduce_into<double>(acc, in, count, op); break;
  }
}

//! Posts this rank's arguments, waits for everyone, runs body (which reads the other
//! ranks' posts), then waits again so no buffer is reused while another rank reads it.
//! `after` runs once every rank is past body (e.g. copying a reduction into place).
template <class Body, class After>
status collective(thread_group& g, int rank, std::uint64_t& seq, thread_group::post p, Body&& body,
                  After&& after) {
  p.seq = seq++;
  g.slot(rank) = p;
  if (auto st = g.barrier(); !st.ok()) return st;
  status result;
  bool mismatch = false;
  for (int r = 0; r < g.size() && !mismatch; ++r) {
    const auto& o = g.slot(r);
    if (o.op != p.op || o.seq != p.seq) {
      mismatch = true;
      result = comm_err(std::string("collective mismatch: rank ")
                            .append(std::to_string(r))
                            .append(" posted ")
                            .append(op_name(o.op))
                            .append(" #")
                            .append(num(o.seq))
                            .append(", rank ")
                            .append(std::to_string(rank))
                            .append(" posted ")
                            .append(op_name(p.op))
                            .append(" #")
                            .append(num(p.seq)));
    }
  }
  if (!mismatch) result = body();
  if (auto st = g.barrier(); !st.ok()) return st;
  if (mismatch) g.breaks(result.message());  // the ranks have diverged: stop them all
  if (result.ok()) after();
  return result;
}

template <class Body>
status collective(thread_group& g, int rank, std::uint64_t& seq, thread_group::post p,
                  Body&& body) {
  return collective(g, rank, seq, p, std::forward<Body>(body), [] {});
}

}  // namespace

std::vector<std::unique_ptr<thread_communicator>> thread_communicator::create(
    int size, std::chrono::milliseconds timeout) {
  std::vector<std::unique_ptr<thread_communicator>> out;
  if (size < 1) return out;
  auto g = std::make_shared<thread_group>(size, timeout);
  for (int r = 0; r < size; ++r) out.push_back(std::make_unique<thread_communicator>(g, r));
  return out;
}

thread_communicator::thread_communicator(std::shared_ptr<thread_group> group, int rank)
    : group_(std::move(group)), rank_(rank) {}

thread_communicator::~thread_communicator() = default;

int thread_communicator::size() const noexcept { return group_->size(); }

status thread_communicator::posted(status st, request& req) {
  req = request{};
  if (!st.ok()) return st;
  req = request{next_request_++};
  return {};
}

status thread_communicator::iallgatherv(const void* send, std::uint64_t send_bytes, void* recv,
                                        std::span<const std::uint64_t> recv_bytes, request& req) {
  thread_group& g = *group_;
  if (recv_bytes.size() != static_cast<std::size_t>(g.size()))
    return posted(comm_err("allgatherv: recv_bytes needs one entry per rank"), req);
  thread_group::post p;
  p.op = op_kind::allgatherv;
  p.send = send;
  p.bytes = send_bytes;
  auto body = [&]() -> status {
    auto* out = static_cast<std::byte*>(recv);
    std::uint64_t at = 0;
    for (int r = 0; r < g.size(); ++r) {
      const auto& o = g.slot(r);
      if (o.bytes != recv_bytes[static_cast<std::size_t>(r)])
        return comm_err(std::string("allgatherv: rank ")
                            .append(std::to_string(r))
                            .append(" sent ")
                            .append(num(o.bytes))
                            .append(" bytes, expected ")
                            .append(num(recv_bytes[static_cast<std::size_t>(r)])));
      if (o.bytes > 0) std::memcpy(out + at, o.send, o.bytes);
      at += o.bytes;
    }
    return {};
  };
  return posted(collective(g, rank_, seq_, p, body), req);
}

status thread_communicator::ialltoallv(const void* send, std::span<const std::uint64_t> send_bytes,
                                       void* recv, std::span<const std::uint64_t> recv_bytes,
                                       request& req) {
  thread_group& g = *group_;
  const auto w = static_cast<std::size_t>(g.size());
  if (send_bytes.size() != w || recv_bytes.size() != w)
    return posted(comm_err("alltoallv: size spans need one entry per rank"), req);
  thread_group::post p;
  p.op = op_kind::alltoallv;
  p.send = send;
  p.counts = send_bytes.data();
  auto body = [&]() -> status {
    auto* out = static_cast<std::byte*>(recv);
    std::uint64_t at = 0;
    const auto me = static_cast<std::size_t>(rank_);
    for (std::size_t r = 0; r < w; ++r) {
      const auto& o = g.slot(static_cast<int>(r));
      const std::uint64_t from = std::accumulate(o.counts, o.counts + me, std::uint64_t{0});
      if (o.counts[me] != recv_bytes[r])
        return comm_err(std::string("alltoallv: rank ")
                            .append(num(r))
                            .append(" sends ")
                            .append(num(o.counts[me]))
                            .append(" bytes to rank ")
                            .append(num(me))
                            .append(", which expects ")
                            .append(num(recv_bytes[r])));
      if (recv_bytes[r] > 0)
        std::memcpy(out + at, static_cast<const std::byte*>(o.send) + from, recv_bytes[r]);
      at += recv_bytes[r];
    }
    return {};
  };
  return posted(collective(g, rank_, seq_, p, body), req);
}

status thread_communicator::iallreduce(const void* send, void* recv, std::uint64_t count,
                                       element_type type, reduce_op op, request& req) {
  thread_group& g = *group_;
  thread_group::post p;
  p.op = op_kind::allreduce;
  p.send = send;
  p.bytes = count;
  p.type = type;
  p.rop = op;
  const std::uint64_t bytes = count * element_size(type);
  auto body = [&]() -> status {
    for (int r = 0; r < g.size(); ++r) {
      const auto& o = g.slot(r);
      if (o.bytes != count || o.type != type || o.rop != op)
        return comm_err(std::string("allreduce: rank ")
                            .append(std::to_string(r))
                            .append(" passed a different count, type or operation"));
    }
    // Into scratch first: with send == recv another rank may still read this rank's input.
    scratch_.resize(bytes);
    if (bytes > 0) std::memcpy(scratch_.data(), g.slot(0).send, bytes);
    for (int r = 1; r < g.size(); ++r)
      reduce_any(scratch_.data(), static_cast<const std::byte*>(g.slot(r).send), count, type, op);
    return {};
  };
  auto after = [&] {
    if (bytes > 0) std::memcpy(recv, scratch_.data(), bytes);
  };
  return posted(collective(g, rank_, seq_, p, body, after), req);
}

status thread_communicator::ibroadcast(void* buf, std::uint64_t bytes, int root, request& req) {
  thread_group& g = *group_;
  if (root < 0 || root >= g.size()) return posted(comm_err("broadcast: root out of range"), req);
  thread_group::post p;
  p.op = op_kind::broadcast;
  p.send = buf;
  p.bytes = bytes;
  p.root = root;
  auto body = [&]() -> status {
    const auto& o = g.slot(root);
    for (int r = 0; r < g.size(); ++r)
      if (g.slot(r).root != root || g.slot(r).bytes != bytes)
        return comm_err("broadcast: ranks passed different roots or sizes");
    if (rank_ != root && bytes > 0) std::memcpy(buf, o.send, bytes);
    return {};
  };
  return posted(collective(g, rank_, seq_, p, body), req);
}

status thread_communicator::wait(request& req) {
  req = request{};
  return {};
}

status thread_communicator::barrier() {
  thread_group::post p;
  p.op = op_kind::barrier;
  return collective(*group_, rank_, seq_, p, [] { return status{}; });
}

status thread_communicator::split(int color, int key, std::unique_ptr<communicator>& out) {
  out.reset();
  thread_group& g = *group_;
  thread_group::post p;
  p.op = op_kind::split;
  p.color = color;
  p.key = key;
  const std::uint64_t number = splits_++;
  std::shared_ptr<thread_group> mine;
  int my_rank = 0;
  auto body = [&]() -> status {
    if (color < 0) return {};
    std::vector<std::pair<int, int>> members;  // (key, old rank)
    for (int r = 0; r < g.size(); ++r)
      if (g.slot(r).color == color) members.emplace_back(g.slot(r).key, r);
    std::sort(members.begin(), members.end());
    for (std::size_t i = 0; i < members.size(); ++i)
      if (members[i].second == rank_) my_rank = static_cast<int>(i);
    mine = g.joined(number, color, static_cast<int>(members.size()));
    return {};
  };
  if (auto st = collective(g, rank_, seq_, p, body); !st.ok()) return st;
  if (mine) out = std::make_unique<thread_communicator>(std::move(mine), my_rank);
  return {};
}

std::vector<status> run_threads(int size, const std::function<status(communicator&)>& body,
                                std::chrono::milliseconds timeout) {
  std::vector<status> result(static_cast<std::size_t>(std::max(size, 0)));
  auto comms = thread_communicator::create(size, timeout);
  std::vector<std::thread> threads;
  threads.reserve(comms.size());
  for (std::size_t r = 0; r < comms.size(); ++r) {
    threads.emplace_back([&, r] {
      try {
        result[r] = body(*comms[r]);
      } catch (const std::exception& e) {
        result[r] = status{status_code::internal_error, e.what()};
      } catch (...) {
        result[r] = status{status_code::internal_error, "exception in rank body"};
      }
    });
  }
  for (auto& t : threads) t.join();
  return result;
}

}  // namespace gradcodec::comm
