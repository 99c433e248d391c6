// SPDX-License-Identifier: Apache-2.0
#include "threads.hpp"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

#include "gradcodec/cpu.hpp"

namespace gradcodec::cpu {
namespace {

//! Workers sleep on a condition variable; a job hands out task indices through an atomic
//! counter. One job runs at a time (calls from several user threads queue on run_mutex_).
class pool {
 public:
  ~pool() {
    {
      std::lock_guard lock(mutex_);
      stop_ = true;
    }
    wake_.notify_all();
    for (auto& w : workers_) w.join();
  }

  void run(int threads, std::uint64_t tasks, task_ref body) {
    std::lock_guard run_lock(run_mutex_);
    const int helpers = threads - 1;
    {
      std::lock_guard lock(mutex_);
      while (static_cast<int>(workers_.size()) < helpers) {
        const int id = static_cast<int>(workers_.size());
        workers_.emplace_back([this, id] { loop(id); });
      }
      body_ = &body;
      tasks_ = tasks;
      next_.store(0);
      helpers_ = helpers;
      pending_ = helpers;
      ++generation_;
    }
    wake_.notify_all();
    drain(body, tasks);
    std::unique_lock lock(mutex_);
    done_.wait(lock, [&] { return pending_ == 0; });
    body_ = nullptr;
  }

 private:
  void drain(task_ref body, std::uint64_t tasks) {
    for (std::uint64_t t; (t = next_.fetch_add(1)) < tasks;) body(t);
  }

  void loop(int id) {
    std::uint64_t seen = 0;
    std::unique_lock lock(mutex_);
    for (;;) {
      wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      if (id >= helpers_) continue;  // not needed for this job
      const auto* body = body_;
      const std::uint64_t tasks = tasks_;
      lock.unlock();
      drain(*body, tasks);
      lock.lock();
      if (--pending_ == 0) done_.notify_one();
    }
  }

  std::mutex run_mutex_;
  std::mutex mutex_;
  std::condition_variable wake_, done_;
  std::vector<std::thread> workers_;
  const task_ref* body_ = nullptr;
  std::uint64_t tasks_ = 0;
  std::atomic<std::uint64_t> next_{0};
  int helpers_ = 0;
  int pending_ = 0;
  std::uint64_t generation_ = 0;
  bool stop_ = false;
};

pool& the_pool() {
  static pool p;
  return p;
}

}  // namespace

int threads_for(int requested, std::uint64_t tasks) noexcept {
  const int want = requested > 0 ? requested : cpu_default_threads();
  const std::uint64_t t = std::min<std::uint64_t>(static_cast<std::uint64_t>(std::max(want, 1)),
                                                  std::max<std::uint64_t>(tasks, 1));
  return static_cast<int>(t);
}

void parallel_for(int threads, std::uint64_t tasks, task_ref body) {
  if (threads <= 1 || tasks <= 1) {
    for (std::uint64_t t = 0; t < tasks; ++t) body(t);
    return;
  }
  the_pool().run(threads, tasks, body);
}

}  // namespace gradcodec::cpu
