// SPDX-License-Identifier: Apache-2.0
//! @file
//! The agreement every call starts with: a list of checks every rank makes together, so
//! every rank returns the same outcome. docs/comm.md, "The agreement", is the written form.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

#include "comm/src/buffers.hpp"
#include "gradcodec/comm/allreduce.hpp"

namespace gradcodec::comm::detail {

inline constexpr std::uint64_t no_failure = ~std::uint64_t{0};

//! One check of an agreement: a set of fields every rank must hold alike, or (no fields)
//! a failure word whose minimum over the ranks names the first failure (all ones: none).
struct check {
  std::span<const std::uint64_t> fields;
  std::uint64_t word = no_failure;
  //! The error every rank returns when the check fails: for fields, the first field `f`
  //! whose minimum `lo` and maximum `hi` differ; for a word, f = -1 and lo = hi = the
  //! minimum. `arg` is the check's own (an inner step to name, say).
  status (*error)(int f, std::uint64_t lo, std::uint64_t hi, std::uint64_t arg) = nullptr;
  std::uint64_t arg = 0;
};

//! A rank's failure word: its rank and the caller's reason code, the lowest rank first.
constexpr std::uint64_t failure_word(int rank, std::uint16_t reason) noexcept {
  return (static_cast<std::uint64_t>(rank) << 16) | reason;
}
//! The bytes of the first round of a plain call's agreement: its failure word, and its
//! fields' digest with the digest's complement.
inline constexpr std::uint64_t call_check_bytes = 3 * sizeof(std::uint64_t);

//! "<who>: ranks disagree on <field> (min <lo>, max <hi>)", or "(values differ)" when lo
//! and hi are empty (a hashed field).
status disagreement(std::string_view who, std::string_view field, std::string_view lo,
                    std::string_view hi);
//! "<who>: rank R cannot run this <what>: <reason>", R from a failure word.
status rank_failure(std::string_view who, std::uint64_t failure, std::string_view what,
                    std::string_view reason);

//! The largest agreement: checks, and fields of one set.
inline constexpr std::size_t max_checks = 8;
inline constexpr std::size_t max_fields = 24;

//! The checks in order, through `staging` in the communicator's memory `mem`: one
//! allreduce(max) of a digest per field set and each failure word; a second one, of the
//! set's fields, only when a digest differs (every rank sees that alike).
status agree(communicator& c, memory_ops& mem, buffer& staging, std::span<const check> checks,
             phase_times* times);

//! The allreduce call's own fields (18 of them, docs/comm.md) and this rank's failure.
struct agreement {
  std::uint64_t fields[18] = {};
  std::uint64_t local_failure = no_failure;  // (rank << 16) | reason, or all ones
};
//! The call's two checks, failure first, on `a` (which must outlive them).
void call_checks(const agreement& a, check out[2]) noexcept;

//! The allreduce of allreduce.hpp with `prefix` checked first in the call's agreement: a
//! caller with checks of its own (the outer synchronizer) makes one agreement, not two.
//! The agreement runs whenever `prefix` is not empty, cfg.check_config or not.
status allreduce_checked(communicator& world, const hierarchy* h, const allreduce_config& cfg,
                         const context& ctx, const_tensor_view in, tensor_view out,
                         allreduce_state& state, workspace& ws, phase_times* times,
                         std::span<const check> prefix);

//! Reason codes a rank reports in the agreement when its own checks fail.
enum class local_reason : std::uint16_t {
  invalid_spec = 1,
  unsupported_strategy = 2,
  bad_views = 3,
  bad_tensors = 4,
  state_mismatch = 5,
  bad_hierarchy = 6,
  nonfinite_on_device = 7,
};
std::string_view reason_text(local_reason r) noexcept;

}  // namespace gradcodec::comm::detail
