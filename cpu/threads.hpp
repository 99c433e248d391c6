// SPDX-License-Identifier: Apache-2.0
//! @file
//! A small persistent fork-join pool. Work is split into `tasks` contiguous task indices
//! and every result a kernel writes depends only on the task index, never on which thread
//! ran it, so outputs are identical for any thread count.
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>

namespace gradcodec::cpu {

//! Threads to use for a call: `requested` (> 0) or the library default, never more than
//! `tasks`, at least 1.
int threads_for(int requested, std::uint64_t tasks) noexcept;

//! A non-owning reference to a callable taking a task index. Unlike std::function it never
//! allocates, so the encode/decode paths stay allocation-free.
class task_ref {
 public:
  template <class F, class = std::enable_if_t<!std::is_same_v<std::decay_t<F>, task_ref>>>
  task_ref(F&& f) noexcept  // NOLINT: implicit, to take lambdas at the call site
      : obj_(const_cast<void*>(static_cast<const void*>(&f))),
        call_([](void* o, std::uint64_t t) { (*static_cast<std::remove_reference_t<F>*>(o))(t); }) {
  }
  void operator()(std::uint64_t t) const { call_(obj_, t); }

 private:
  void* obj_;
  void (*call_)(void*, std::uint64_t);
};

//! Runs body(t) for t in [0, tasks) on up to `threads` threads (the caller included) and
//! returns when all are done. Task t runs on exactly one thread. The callable must outlive
//! the call (a lambda at the call site does).
void parallel_for(int threads, std::uint64_t tasks, task_ref body);

}  // namespace gradcodec::cpu
