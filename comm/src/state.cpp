// SPDX-License-Identifier: Apache-2.0
//! @file
//! The error-feedback state: sizing, the configuration fingerprint, and the checksummed
//! byte form (docs/comm.md, "State format").
#include "gradcodec/comm/state.hpp"

#include <algorithm>
#include <tuple>

#include "comm/src/buffers.hpp"
#include "comm/src/chunks.hpp"
#include "comm/src/contexts.hpp"
#include "comm/src/run.hpp"
#include "comm/src/slices.hpp"
#include "comm/src/state_setup.hpp"
#include "comm/src/strategies/strategies.hpp"
#include "gradcodec/frame.hpp"

namespace gradcodec::comm {

namespace {

constexpr std::uint32_t state_magic = 0x53414347u;  // bytes "GCAS"
constexpr std::uint16_t state_version = 1;
constexpr std::uint64_t state_header = 64;
constexpr std::uint64_t max_floats = std::uint64_t{1} << 48;

status corrupt(std::string_view why) { return {status_code::corrupt_frame, why}; }

}  // namespace

state_lengths lengths_of(const allreduce_state& s) noexcept {
  if (s.device) return s.device->n;
  return {s.worker_residual.size(), s.server_residual.size(), s.q.size()};
}

std::uint64_t state_bytes(const allreduce_state& s) noexcept {
  const state_lengths n = lengths_of(s);
  return state_header + 4 * (n.worker + n.server + n.q) + 4;
}

result<std::size_t> save_state(const allreduce_state& s, mutable_bytes out) noexcept {
  using detail::put;
  const std::uint64_t total = state_bytes(s);
  if (out.size() < total)
    return status{status_code::output_too_small, "save_state: output smaller than state_bytes()"};
  std::byte* p = out.data();
  std::fill(p, p + state_header, std::byte{0});
  put<std::uint32_t>(p, state_magic);
  put<std::uint16_t>(p + 4, state_version);
  put<std::uint8_t>(p + 6, static_cast<std::uint8_t>(s.role));
  put<std::uint8_t>(p + 7, s.q_ready ? 1 : 0);
  put<std::uint64_t>(p + 8, s.fingerprint);
  put<std::uint32_t>(p + 16, s.world);
  put<std::uint32_t>(p + 20, s.rank);
  put<std::uint64_t>(p + 24, s.steps);
  const state_lengths n = lengths_of(s);
  put<std::uint64_t>(p + 32, n.worker);
  put<std::uint64_t>(p + 40, n.server);
  put<std::uint64_t>(p + 48, n.q);
  std::byte* at = p + state_header;
  const device_arrays* d = s.device.get();
  for (auto [v, block, count] :
       {std::tuple{&s.worker_residual, d ? d->worker.get() : nullptr, n.worker},
        std::tuple{&s.server_residual, d ? d->server.get() : nullptr, n.server},
        std::tuple{&s.q, d ? d->q.get() : nullptr, n.q}}) {
    if (count > 0) {
      if (d == nullptr)
        std::memcpy(at, v->data(), count * 4);
      else if (auto st = d->download(at, block, count * 4); !st.ok())
        return st;
    }
    at += count * 4;
  }
  put<std::uint32_t>(at, crc32c(p, static_cast<std::size_t>(total - 4)));
  return static_cast<std::size_t>(total);
}

status load_state(const_bytes in, allreduce_state& out) {
  using detail::get;
  if (in.size() < state_header + 4) return corrupt("state: shorter than its 68-byte minimum");
  const std::byte* p = in.data();
  if (get<std::uint32_t>(p) != state_magic) return corrupt("state: bad magic");
  if (get<std::uint16_t>(p + 4) != state_version)
    return {status_code::unsupported_version, "state: unsupported version"};
  const auto role = get<std::uint8_t>(p + 6);
  const auto flags = get<std::uint8_t>(p + 7);
  if (role < 1 || role > 3) return corrupt("state: unknown role");
  if (flags > 1) return corrupt("state: unknown flag bits");
  if (get<std::uint64_t>(p + 56) != 0) return corrupt("state: reserved bytes not zero");
  const auto nw = get<std::uint64_t>(p + 32), ns = get<std::uint64_t>(p + 40),
             nq = get<std::uint64_t>(p + 48);
  if (nw > max_floats || ns > max_floats || nq > max_floats)
    return corrupt("state: length out of range");
  if (in.size() != state_header + 4 * (nw + ns + nq) + 4)
    return corrupt("state: size differs from its lengths");
  if (get<std::uint32_t>(p + in.size() - 4) != crc32c(p, in.size() - 4))
    return corrupt("state: checksum mismatch");
  allreduce_state s;
  s.role = static_cast<state_role>(role);
  s.q_ready = (flags & 1) != 0;
  s.fingerprint = get<std::uint64_t>(p + 8);
  s.world = get<std::uint32_t>(p + 16);
  s.rank = get<std::uint32_t>(p + 20);
  s.steps = get<std::uint64_t>(p + 24);
  const std::byte* at = p + state_header;
  for (auto [v, count] : {std::pair{&s.worker_residual, nw}, std::pair{&s.server_residual, ns},
                          std::pair{&s.q, nq}}) {
    v->resize(count);
    if (count > 0) std::memcpy(v->data(), at, count * 4);
    at += count * 4;
  }
  out = std::move(s);
  return {};
}

}  // namespace gradcodec::comm

namespace gradcodec::comm::detail {

std::uint64_t config_fingerprint(const allreduce_config& cfg, strategy how, std::uint64_t n,
                                 std::uint64_t rows, state_role role) noexcept {
  std::uint64_t h = fnv1a(to_string(cfg.spec));
  for (std::uint64_t v :
       {static_cast<std::uint64_t>(how), n, rows, cfg.segment_elements,
        static_cast<std::uint64_t>(resolved_error_feedback(cfg) && !cfg.uncompressed),
        static_cast<std::uint64_t>(role), static_cast<std::uint64_t>(cfg.uncompressed)})
    h = splitmix64(h ^ v);
  for (const tensor_slot& s : cfg.tensors)
    h = splitmix64(splitmix64(splitmix64(h ^ s.offset) ^ s.n) ^ s.rows);
  return h;
}

state_sizes expected_sizes(const run& r, state_role role) {
  state_sizes z;
  if (role == state_role::member || r.cfg.uncompressed) return z;
  const codec_id id = r.cfg.spec.id;
  const bool powersgd_dense = id == codec_id::powersgd && r.how == strategy::dense;
  if (r.error_feedback || powersgd_dense) z.worker = r.in.n;
  if (r.how == strategy::two_phase && r.error_feedback && r.segments > 0) {
    const std::uint64_t full = chunk_of(r.seg_len, r.unit, r.world, r.me).len;
    const std::uint64_t last = chunk_of(r.seg(r.segments - 1).len, r.unit, r.world, r.me).len;
    z.server = (r.segments - 1) * full + last;
  }
  if (powersgd_dense) z.q = powersgd_q_size(r.cfg.spec, r.pieces);
  return z;
}

void init_state(run& r, state_role role, std::uint64_t fingerprint) {
  const state_sizes z = expected_sizes(r, role);
  allreduce_state& s = r.st;
  s.reset();
  s.role = role;
  s.fingerprint = fingerprint;
  s.world = static_cast<std::uint32_t>(r.world);
  s.rank = static_cast<std::uint32_t>(r.me);
  s.worker_residual.assign(z.worker, 0.0f);
  s.server_residual.assign(z.server, 0.0f);
  s.q.assign(z.q, 0.0f);
}

bool state_matches(const run& r, state_role role, std::uint64_t fingerprint) {
  const allreduce_state& s = r.st;
  const state_sizes z = expected_sizes(r, role);
  const state_lengths n = lengths_of(s);
  return s.role == role && s.fingerprint == fingerprint &&
         s.world == static_cast<std::uint32_t>(r.world) &&
         s.rank == static_cast<std::uint32_t>(r.me) && n.worker == z.worker &&
         n.server == z.server && n.q == z.q;
}

status place_state(run& r) {
  allreduce_state& s = r.st;
  memory_ops& m = r.mem;
  const bool here = m.space() == memory_space::host
                        ? s.device == nullptr
                        : s.device != nullptr && s.device->device == m.device();
  if (!here) {
    const state_lengths n = lengths_of(s);
    std::vector<float>* host[] = {&s.worker_residual, &s.server_residual, &s.q};
    const std::uint64_t counts[] = {n.worker, n.server, n.q};
    if (s.device) {
      // Device arrays come back to the host first (also on their way to another device).
      const device_arrays& d = *s.device;
      const std::byte* blocks[] = {d.worker.get(), d.server.get(), d.q.get()};
      for (int a = 0; a < 3; ++a) {
        host[a]->resize(counts[a]);
        if (counts[a] > 0)
          if (auto st = d.download(host[a]->data(), blocks[a], counts[a] * 4); !st.ok()) return st;
      }
      s.device.reset();
    }
    if (m.space() != memory_space::host) {
      auto d = std::make_shared<device_arrays>();
      d->n = n;
      d->device = m.device();
      d->download = m.detached_download();
      memory_ops::block* blocks[] = {&d->worker, &d->server, &d->q};
      for (int a = 0; a < 3; ++a) {
        *blocks[a] = m.allocate(std::max<std::uint64_t>(counts[a], 1) * 4);
        if (!*blocks[a])
          return {status_code::device_error, "allreduce: no device memory for the state"};
        if (counts[a] > 0)
          if (auto st = m.upload(blocks[a]->get(), host[a]->data(), counts[a] * 4); !st.ok())
            return st;
      }
      for (auto* v : host) std::vector<float>().swap(*v);
      s.device = std::move(d);
    }
  }
  if (s.device) {
    r.worker_residual = reinterpret_cast<float*>(s.device->worker.get());
    r.server_residual = reinterpret_cast<float*>(s.device->server.get());
    r.q = reinterpret_cast<float*>(s.device->q.get());
  } else {
    r.worker_residual = s.worker_residual.data();
    r.server_residual = s.server_residual.data();
    r.q = s.q.data();
  }
  return {};
}

}  // namespace gradcodec::comm::detail
