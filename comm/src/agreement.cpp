// SPDX-License-Identifier: Apache-2.0
//! @file
//! The checks at the start of every call: each field set travels as a digest and each
//! failure word as its complement in one allreduce(max), so every rank learns the same
//! minima and maxima and returns the same error; a differing digest sends its fields.
#include <string>

#include "comm/src/agreement.hpp"
#include "comm/src/buffers.hpp"
#include "comm/src/collectives.hpp"
#include "comm/src/contexts.hpp"

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

status disagreement(std::string_view who, std::string_view field, std::string_view lo,
                    std::string_view hi) {
  std::string m = std::string(who).append(": ranks disagree on ").append(field);
  if (lo.empty() && hi.empty())
    m.append(" (values differ)");
  else
    m.append(" (min ").append(lo).append(", max ").append(hi).append(")");
  return {status_code::comm_error, m};
}

status rank_failure(std::string_view who, std::uint64_t failure, std::string_view what,
                    std::string_view reason) {
  return {status_code::comm_error, std::string(who)
                                       .append(": rank ")
                                       .append(std::to_string(failure >> 16))
                                       .append(" cannot run this ")
                                       .append(what)
                                       .append(": ")
                                       .append(reason)};
}

void call_checks(const agreement& a, check out[2]) noexcept {
  out[0] = {{},
            a.local_failure,
            [](int, std::uint64_t failure, std::uint64_t, std::uint64_t) {
              return rank_failure("allreduce", failure, "call",
                                  reason_text(static_cast<local_reason>(failure & 0xFFFF)));
            },
            0};
  out[1] = {a.fields, no_failure,
            [](int f, std::uint64_t lo, std::uint64_t hi, std::uint64_t) {
              if (names[f].hashed) return disagreement("allreduce", names[f].text, {}, {});
              return disagreement("allreduce", names[f].text, describe(f, lo), describe(f, hi));
            },
            0};
}

namespace {

std::uint64_t digest(std::span<const std::uint64_t> fields) noexcept {
  std::uint64_t h = splitmix64(fields.size());
  for (const std::uint64_t v : fields) h = splitmix64(h ^ v);
  return h;
}

//! allreduce(max) of `count` words through the staging buffer, in place.
status reduce_max(communicator& c, memory_ops& mem, buffer& staging, std::uint64_t* v,
                  std::size_t count, phase_times* times) {
  const std::size_t bytes = count * sizeof(std::uint64_t);
  if (times) {
    times->bytes_sent += bytes;
    times->bytes_received += bytes;
    times->collectives += 1;
  }
  // Through the communicator's memory (a device buffer for NCCL).
  std::byte* at = staging.reserve(bytes, mem);
  if (auto st = mem.upload(at, v, bytes); !st.ok()) return st;
  if (auto st = c.allreduce(at, at, count, element_type::u64, reduce_op::max); !st.ok()) return st;
  return mem.download(v, at, bytes);
}

}  // namespace

status agree(communicator& c, memory_ops& mem, buffer& staging, std::span<const check> checks,
             phase_times* times) {
  timer t(times, &phase_times::agree_s);
  if (checks.size() > max_checks)
    return {status_code::internal_error, "agreement: more checks than it holds"};
  // Round 1: a field set as its digest and the digest's complement (so every rank learns
  // the digest's maximum and minimum), a failure word as its complement (its minimum).
  std::uint64_t v[2 * max_fields];
  std::size_t count = 0;
  for (const check& k : checks) {
    if (k.fields.size() > max_fields)
      return {status_code::internal_error, "agreement: a check with more fields than it holds"};
    if (k.fields.empty()) {
      v[count++] = ~k.word;
    } else {
      const std::uint64_t d = digest(k.fields);
      v[count++] = d;
      v[count++] = ~d;
    }
  }
  if (auto st = reduce_max(c, mem, staging, v, count, times); !st.ok()) return st;
  // The first failing check decides; every rank holds the same words, so every rank
  // makes the same second round, if any.
  std::size_t at = 0;
  for (const check& k : checks) {
    if (k.fields.empty()) {
      const std::uint64_t lowest = ~v[at++];
      if (lowest != no_failure) return k.error(-1, lowest, lowest, k.arg);
      continue;
    }
    const bool alike = v[at] == ~v[at + 1];
    at += 2;
    if (alike) continue;
    // Round 2: the set's fields and their complements name the field.
    std::uint64_t f[2 * max_fields];
    const std::size_t n = k.fields.size();
    for (std::size_t i = 0; i < n; ++i) {
      f[i] = k.fields[i];
      f[n + i] = ~k.fields[i];
    }
    if (auto st = reduce_max(c, mem, staging, f, 2 * n, times); !st.ok()) return st;
    for (std::size_t i = 0; i < n; ++i)
      if (f[i] != ~f[n + i]) return k.error(static_cast<int>(i), ~f[n + i], f[i], k.arg);
    return {status_code::internal_error, "agreement: the digests differ but no field does"};
  }
  return {};
}

}  // namespace gradcodec::comm::detail
