// SPDX-License-Identifier: Apache-2.0
//! @file
//! A small persistent fork-join pool. Work is split into `tasks` contiguous task indices
//! and every result a kernel writes depends only on the task index, never on which thread
//! ran it, so outputs are identical for any thread count.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>

namespace gradcodec::cpu {

//! Threads to use for a call: `requested` (> 0) or the library default, never more than
//! `tasks`, at least 1.
int threads_for(int requested, std::uint64_t tasks) noexcept;

//! Runs body(t) for t in [0, tasks) on up to `threads` threads (the caller included) and
//! returns when all are done. Task t runs on exactly one thread.
void parallel_for(int threads, std::uint64_t tasks, const std::function<void(std::uint64_t)>& body);

}  // namespace gradcodec::cpu
