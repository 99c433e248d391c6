// SPDX-License-Identifier: Apache-2.0
//! @file
//! The byte form of an outer_state (docs/outer.md, "State format"): a 96-byte header, the
//! f32 arrays (θ_global, momentum, the settled pending Δ), each fragment's allreduce_state
//! in its own byte form behind its length, and a CRC-32C of everything before it.
#include <algorithm>
#include <cstring>

#include "comm/src/slices.hpp"
#include "gradcodec/comm/outer.hpp"
#include "gradcodec/frame.hpp"

namespace gradcodec::comm {

namespace {

constexpr std::uint32_t outer_magic = 0x534F4347u;  // bytes "GCOS"
constexpr std::uint16_t outer_version = 1;
constexpr std::uint64_t outer_header = 96;
constexpr std::uint64_t max_floats = std::uint64_t{1} << 48;
constexpr std::uint64_t max_fragments = std::uint64_t{1} << 20;

status corrupt(std::string_view why) { return {status_code::corrupt_frame, why}; }

}  // namespace

std::uint64_t outer_state_bytes(const outer_state& s) noexcept {
  std::uint64_t total = outer_header + 4 * (s.global.size() + s.momentum.size() + s.pending.size());
  for (const allreduce_state& r : s.reduce) total += 8 + (r.initialized() ? state_bytes(r) : 0);
  return total + 4;
}

result<std::size_t> save_outer_state(const outer_state& s, mutable_bytes out) noexcept {
  using detail::put;
  if (s.pending_fragment >= 0 && !s.pending_ready)
    return status{status_code::invalid_argument,
                  "save_outer_state: a sync is in flight; outer_settle() it first"};
  const std::uint64_t total = outer_state_bytes(s);
  if (out.size() < total)
    return status{status_code::output_too_small,
                  "save_outer_state: output smaller than outer_state_bytes()"};
  std::byte* p = out.data();
  std::fill(p, p + outer_header, std::byte{0});
  put<std::uint32_t>(p, outer_magic);
  put<std::uint16_t>(p + 4, outer_version);
  put<std::uint8_t>(p + 6, s.pending_ready ? 1 : 0);
  put<std::uint64_t>(p + 8, s.fingerprint);
  put<std::uint64_t>(p + 16, s.step);
  put<std::uint64_t>(p + 24, s.rounds);
  put<std::uint64_t>(p + 32, static_cast<std::uint64_t>(s.pending_fragment));
  put<std::uint64_t>(p + 40, s.pending_step);
  put<std::uint32_t>(p + 48, s.sync_every);
  put<std::uint32_t>(p + 52, s.fragments);
  put<std::uint32_t>(p + 56, s.delay);
  put<std::uint64_t>(p + 64, s.global.size());
  put<std::uint64_t>(p + 72, s.momentum.size());
  put<std::uint64_t>(p + 80, s.pending.size());
  put<std::uint64_t>(p + 88, s.reduce.size());
  std::byte* at = p + outer_header;
  for (const auto* v : {&s.global, &s.momentum, &s.pending}) {
    if (!v->empty()) std::memcpy(at, v->data(), v->size() * 4);
    at += v->size() * 4;
  }
  for (const allreduce_state& r : s.reduce) {
    // A fragment not synced yet has no state: length 0.
    const std::uint64_t len = r.initialized() ? state_bytes(r) : 0;
    put<std::uint64_t>(at, len);
    if (len == 0) {
      at += 8;
      continue;
    }
    auto written = save_state(r, {at + 8, static_cast<std::size_t>(len)});
    if (!written) return written.error();
    at += 8 + len;
  }
  put<std::uint32_t>(at, crc32c(p, static_cast<std::size_t>(total - 4)));
  return static_cast<std::size_t>(total);
}

status load_outer_state(const_bytes in, outer_state& out) {
  using detail::get;
  if (in.size() < outer_header + 4) return corrupt("outer state: shorter than its header");
  const std::byte* p = in.data();
  if (get<std::uint32_t>(p) != outer_magic) return corrupt("outer state: bad magic");
  if (get<std::uint16_t>(p + 4) != outer_version)
    return {status_code::unsupported_version, "outer state: unsupported version"};
  const auto flags = get<std::uint8_t>(p + 6);
  if (flags > 1 || get<std::uint8_t>(p + 7) != 0 || get<std::uint32_t>(p + 60) != 0)
    return corrupt("outer state: unknown flag or reserved bits");
  if (get<std::uint32_t>(p + in.size() - 4) != crc32c(p, in.size() - 4))
    return corrupt("outer state: checksum mismatch");
  const std::uint64_t ng = get<std::uint64_t>(p + 64), nm = get<std::uint64_t>(p + 72),
                      np = get<std::uint64_t>(p + 80), nr = get<std::uint64_t>(p + 88);
  if (ng > max_floats || nm > max_floats || np > max_floats || nr > max_fragments)
    return corrupt("outer state: length out of range");
  if (in.size() < outer_header + 4 * (ng + nm + np) + 8 * nr + 4)
    return corrupt("outer state: size differs from its lengths");
  outer_state s;
  s.pending_ready = flags == 1;
  s.fingerprint = get<std::uint64_t>(p + 8);
  s.step = get<std::uint64_t>(p + 16);
  s.rounds = get<std::uint64_t>(p + 24);
  s.pending_fragment = static_cast<std::int64_t>(get<std::uint64_t>(p + 32));
  s.pending_step = get<std::uint64_t>(p + 40);
  s.sync_every = get<std::uint32_t>(p + 48);
  s.fragments = get<std::uint32_t>(p + 52);
  s.delay = get<std::uint32_t>(p + 56);
  if (s.fragments != nr || (nm != 0 && nm != ng) || (np != 0 && !s.pending_ready) ||
      s.pending_fragment < -1 || s.pending_fragment >= static_cast<std::int64_t>(nr) ||
      (s.pending_fragment >= 0) != s.pending_ready)
    return corrupt("outer state: inconsistent fields");
  const std::byte* at = p + outer_header;
  const std::byte* end = p + in.size() - 4;
  for (auto [v, count] : {std::pair{&s.global, ng}, {&s.momentum, nm}, {&s.pending, np}}) {
    v->resize(count);
    if (count > 0) std::memcpy(v->data(), at, count * 4);
    at += count * 4;
  }
  s.reduce.resize(nr);
  for (allreduce_state& r : s.reduce) {
    if (end - at < 8) return corrupt("outer state: truncated fragment state");
    const std::uint64_t len = get<std::uint64_t>(at);
    if (len > static_cast<std::uint64_t>(end - at - 8))
      return corrupt("outer state: truncated fragment state");
    if (len > 0)
      if (auto st = load_state({at + 8, static_cast<std::size_t>(len)}, r); !st.ok()) return st;
    at += 8 + len;
  }
  if (at != end) return corrupt("outer state: size differs from its lengths");
  out = std::move(s);
  return {};
}

}  // namespace gradcodec::comm
