// SPDX-License-Identifier: Apache-2.0
//! @file
//! The configuration check at the start of every call: one allreduce(max) over the fields
//! and their bitwise complements gives every rank the maximum and the minimum of each
//! field, so all ranks see the same disagreement and return the same error.
#include <string>

#include "comm/src/agreement.hpp"
#include "comm/src/buffers.hpp"
#include "comm/src/collectives.hpp"

namespace gradcodec::comm::detail {

namespace {

constexpr int field_count = static_cast<int>(sizeof(agreement::fields) / sizeof(std::uint64_t));

struct field_name {
  const char* text;
  bool hashed;  // print "values differ" instead of numbers
};

constexpr field_name names[field_count] = {
    {"the protocol version", false},  {"hierarchical mode", false},
    {"the strategy", false},          {"the codec", false},
    {"the codec spec", true},         {"the element count", false},
    {"the input dtype", false},       {"the tensor layout", true},
    {"the segment length", false},    {"averaging", false},
    {"error feedback", false},        {"pipelining", false},
    {"the context seed", false},      {"the context step", false},
    {"the context tensor id", false}, {"the state's step count", false},
    {"the communicator size", false}, {"uncompressed mode", false},
};

std::string describe(int f, std::uint64_t v) {
  if (f == 2) return std::string(strategy_name(static_cast<strategy>(v)));
  if (f == 3) return std::string(codec_name(static_cast<codec_id>(v)));
  if (f == 6) return std::string(dtype_name(static_cast<dtype>(v)));
  return std::to_string(v);
}

}  // namespace

std::string_view reason_text(local_reason r) noexcept {
  switch (r) {
    case local_reason::invalid_spec: return "its codec spec does not validate";
    case local_reason::unsupported_strategy: return "its codec does not support the strategy";
    case local_reason::bad_views:
      return "its input or output view is invalid (length, dtype, null or overlap)";
    case local_reason::bad_tensors: return "its tensor slots are invalid";
    case local_reason::state_mismatch:
      return "its error-feedback state belongs to another configuration";
    case local_reason::bad_hierarchy:
      return "its hierarchy is inconsistent (intra/inter communicators)";
    case local_reason::nonfinite_on_device:
      return "its spec asks for nonfinite=error, which device memory cannot check";
  }
  return "unknown reason";
}

status agree(communicator& c, memory_ops& mem, buffer& staging, const agreement& a,
             phase_times* times) {
  timer t(times, &phase_times::agree_s);
  constexpr int total = field_count + 1;
  std::uint64_t v[2 * total];
  for (int f = 0; f < field_count; ++f) v[f] = a.fields[f];
  v[field_count] = a.local_failure;
  for (int f = 0; f < total; ++f) v[total + f] = ~v[f];
  if (times) {
    times->bytes_sent += sizeof v;
    times->bytes_received += sizeof v;
    times->collectives += 1;
  }
  // Through the communicator's memory (a device buffer for NCCL).
  std::byte* at = staging.reserve(sizeof v, mem);
  if (auto st = mem.upload(at, v, sizeof v); !st.ok()) return st;
  if (auto st = c.allreduce(at, at, 2 * total, element_type::u64, reduce_op::max); !st.ok())
    return st;
  if (auto st = mem.download(v, at, sizeof v); !st.ok()) return st;
  const std::uint64_t failure = ~v[total + field_count];  // the minimum: lowest failing rank
  if (failure != ~std::uint64_t{0}) {
    const std::uint64_t rank = failure >> 16;
    const auto reason = static_cast<local_reason>(failure & 0xFFFF);
    return {status_code::comm_error, std::string("allreduce: rank ")
                                         .append(std::to_string(rank))
                                         .append(" cannot run this call: ")
                                         .append(reason_text(reason))};
  }
  for (int f = 0; f < field_count; ++f) {
    const std::uint64_t hi = v[f], lo = ~v[total + f];
    if (hi == lo) continue;
    std::string m = std::string("allreduce: ranks disagree on ").append(names[f].text);
    if (names[f].hashed)
      m.append(" (values differ)");
    else
      m.append(" (min ")
          .append(describe(f, lo))
          .append(", max ")
          .append(describe(f, hi))
          .append(")");
    return {status_code::comm_error, m};
  }
  return {};
}

}  // namespace gradcodec::comm::detail
