// SPDX-License-Identifier: Apache-2.0
//! @file
//! Shared machinery of the strategies: workspace, hashing, derived contexts, chunking,
//! failure propagation through block headers, and the pipeline driver.
#include <algorithm>
#include <string>

#include "gradcodec/blocks/codec_traits.hpp"
#include "internal.hpp"

namespace gradcodec::comm {

workspace::workspace() : impl_(std::make_unique<impl>()) {}
workspace::~workspace() = default;
workspace::workspace(workspace&&) noexcept = default;
workspace& workspace::operator=(workspace&&) noexcept = default;

std::size_t workspace::bytes() const noexcept { return impl_ ? impl_->bytes() : 0; }

void workspace::release() noexcept {
  if (impl_) *impl_ = impl{};
}

std::size_t workspace::impl::bytes() const noexcept {
  std::size_t b = scratch.size() + accum.size() + prescaled.size() + node.size() + flat.size() +
                  dense_send.size() + dense_recv.size() + values.size() + words.size() +
                  node_word.size() + staged.size() + verdicts.size() + host.capacity();
  for (const auto& s : slots)
    b += s.send.size() + s.recv.size() + s.server_send.size() + s.server_recv.size() +
         s.frame.size() + s.headers.size();
  if (node_side) b += node_side->bytes();
  return b;
}

}  // namespace gradcodec::comm

namespace gradcodec::comm::detail {

std::byte* buffer::reserve(std::size_t bytes, memory_ops& m) {
  const bool same = space_ == m.space() && device_ == m.device();
  if (same && bytes <= size_ && p_) return p_.get();
  // Grow geometrically so a slowly growing need reallocates only a few times.
  const std::size_t want = std::max<std::size_t>({bytes, same ? size_ + size_ / 2 : 0, 64});
  release();
  p_ = m.allocate(want);
  if (!p_) throw std::bad_alloc();
  size_ = want;
  space_ = m.space();
  device_ = m.device();
  return p_.get();
}

std::uint64_t splitmix64(std::uint64_t x) noexcept {
  std::uint64_t z = x + 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

std::uint64_t fnv1a(std::string_view s, std::uint64_t h) noexcept {
  for (char c : s) {
    h ^= static_cast<unsigned char>(c);
    h *= 0x100000001b3ull;
  }
  return h;
}

context derive(const context& ctx, std::uint64_t role, std::uint64_t segment, std::uint64_t chunk,
               std::uint64_t rank) noexcept {
  std::uint64_t id = splitmix64(ctx.tensor_id ^ role);
  id = splitmix64(id ^ segment);
  id = splitmix64(id ^ chunk);
  id = splitmix64(id ^ rank);
  return {ctx.seed, ctx.step, id};
}

range chunk_of(std::uint64_t len, std::uint64_t unit, int world, int c) noexcept {
  const std::uint64_t units = (len + unit - 1) / unit;
  const auto w = static_cast<std::uint64_t>(world);
  const auto cc = static_cast<std::uint64_t>(c);
  const std::uint64_t base = units / w, rem = units % w;
  const std::uint64_t first = cc * base + std::min(cc, rem);
  const std::uint64_t count = base + (cc < rem ? 1 : 0);
  const std::uint64_t begin = std::min(len, first * unit);
  const std::uint64_t end = std::min(len, (first + count) * unit);
  return {begin, end - begin};
}

std::uint64_t unit_of(const codec_spec& spec) noexcept {
  return blocks::traits_of(spec.id).bucketed ? spec.bucket : 1;
}

void run::fail(const status& s) {
  if (local.ok()) local = s;
  note(error_word(reported_rank, s.ok() ? status_code::internal_error : s.code()));
}

void run::note(std::uint64_t word) noexcept {
  if (word == 0) return;
  const auto rank_of = [](std::uint64_t w) { return (w & ~(std::uint64_t{1} << 63)) >> 8; };
  if (poison == 0 || rank_of(word) < rank_of(poison)) poison = word;
}

segment run::seg(std::uint64_t i) const noexcept {
  if (!pieces.empty()) return {pieces[i].offset, pieces[i].n, pieces[i].rows};
  const std::uint64_t off = i * seg_len;
  return {off, std::min(seg_len, in.n - off), 0};
}

status run::outcome() const {
  if (!local.ok()) return local;
  return failure_status(poison);
}

std::uint64_t error_word(int rank, status_code code) noexcept {
  return (std::uint64_t{1} << 63) | (static_cast<std::uint64_t>(rank) << 8) |
         static_cast<std::uint64_t>(code);
}

status failure_status(std::uint64_t word) {
  if (word == 0) return {};
  const std::uint64_t rank = (word & ~(std::uint64_t{1} << 63)) >> 8;
  const auto code = static_cast<status_code>(word & 0xFF);
  return {status_code::comm_error, std::string("rank ")
                                       .append(std::to_string(rank))
                                       .append(" failed (")
                                       .append(status_code_name(code))
                                       .append("); no rank has a result")};
}

//! `bytes` of the workspace's scratch (none for 0).
static std::span<std::byte> scratch_of(run& r, std::size_t bytes) {
  if (bytes == 0) return {};
  return {r.ws.scratch.reserve(bytes, r.mem), bytes};
}

std::span<std::byte> codec_scratch(run& r, const codec_spec& spec, const_tensor_view shape,
                                   operation op) {
  auto need = workspace_size(spec, shape, op, r.exec({}));
  if (!need) {
    r.fail(need.error());
    return {};
  }
  return scratch_of(r, need.value());
}

std::uint64_t encode_frame(run& r, const context& fctx, const_tensor_view in, tensor_view residual,
                           mutable_bytes dst) {
  if (!frame_aligned(r, dst.data())) return 0;
  const bool feedback = residual.data != nullptr;
  // Prepared once: the spec is checked and the backend chosen once per frame.
  const auto prepared = prepare_encode(
      r.cfg.spec, in, feedback ? operation::encode_with_feedback : operation::encode, r.exec({}));
  if (!prepared) {
    r.fail(prepared.error());
    return 0;
  }
  const auto ws = scratch_of(r, prepared.value().workspace_bytes());
  const result<std::size_t> written =
      feedback ? encode_with_feedback(prepared.value(), fctx, in, residual, dst, r.exec(ws))
               : encode(prepared.value(), fctx, in, dst, r.exec(ws));
  if (!written) {
    r.fail(written.error());
    return 0;
  }
  return written.value();
}

bool frame_aligned(run& r, const void* frame) {
  if (reinterpret_cast<std::uintptr_t>(frame) % frame_align == 0) return true;
  r.fail({status_code::internal_error, "allreduce: a frame is not 16-byte aligned"});
  return false;
}

context frame_context(const run& r, std::uint64_t role, std::uint64_t segment,
                      std::uint64_t chunk) {
  // Random-k must pick the same indices on every rank; other codecs decorrelate ranks.
  const bool shared = r.cfg.spec.id == codec_id::randomk || role == role_server;
  return derive(r.ctx, role, segment, chunk,
                shared ? shared_rank : static_cast<std::uint64_t>(r.me));
}

std::uint64_t read_block(run& r, const std::byte* at, std::uint64_t capacity) {
  const auto word = get<std::uint64_t>(at);
  const auto bytes = get<std::uint64_t>(at + 8);
  if (word != 0) {
    // A word that error_word() cannot have made is garbage from the wire, not a report.
    const std::uint64_t code = word & 0xFF, rank = (word & ~(std::uint64_t{1} << 63)) >> 8;
    if ((word >> 63) == 0 || code == 0 ||
        code > static_cast<std::uint64_t>(status_code::internal_error) || rank > max_rank) {
      r.fail({status_code::corrupt_frame, "received a corrupt block header"});
      return 0;
    }
    r.note(word);
    return 0;
  }
  if (bytes > capacity) {
    r.fail({status_code::corrupt_frame, "received a block header longer than its block"});
    return 0;
  }
  return bytes;
}

status read_blocks(run& r, const std::byte* base, std::span<const std::uint64_t> offsets,
                   std::span<const std::uint64_t> capacities, std::vector<std::uint64_t>& lengths,
                   std::vector<frame_header>* frames) {
  const std::size_t n = offsets.size();
  // A block too small for a frame header (an empty chunk's) cannot lend one: then no frame
  // headers are read at all, and the decodes read their own.
  for (std::size_t i = 0; i < n && frames != nullptr; ++i)
    if ((capacities.size() == 1 ? capacities[0] : capacities[i]) < header_bytes) frames = nullptr;
  const std::size_t width = block_header + (frames != nullptr ? header_bytes : 0);
  auto& host = r.ws.host;
  host.resize(n * width);
  bool uniform = n > 0;
  const std::uint64_t pitch = n > 1 ? offsets[1] - offsets[0] : width;
  for (std::size_t i = 1; i < n && uniform; ++i) uniform = offsets[i] - offsets[i - 1] == pitch;
  // One strided copy when the blocks are evenly spaced (one wait on a device), else one each.
  if (uniform) {
    if (auto st = r.mem.download(host.data(), base + offsets[0], width, pitch, n); !st.ok())
      return st;
  } else {
    for (std::size_t i = 0; i < n; ++i)
      if (auto st = r.mem.download(host.data() + i * width, base + offsets[i], width); !st.ok())
        return st;
  }
  lengths.assign(n, 0);
  for (std::size_t i = 0; i < n; ++i)
    lengths[i] = read_block(r, host.data() + i * width,
                            capacities.size() == 1 ? capacities[0] : capacities[i]);
  if (frames == nullptr) return {};
  frames->assign(n, frame_header{});
  for (std::size_t i = 0; i < n && !r.failed(); ++i) {
    // Every block here can hold a frame (no empty chunks): one without is corrupt, as the
    // decode of an empty frame would say.
    if (lengths[i] == 0) {
      r.fail({status_code::corrupt_frame, "truncated: a block without its frame"});
      break;
    }
    auto h = peek({host.data() + i * width + block_header, header_bytes});
    if (!h) {
      r.fail(h.error());
    } else {
      (*frames)[i] = h.value();
    }
  }
  return {};
}

status decode_frames(run& r, std::span<const frame_decode> jobs,
                     std::span<const frame_header> headers) {
  const bool expected = !headers.empty();
  frame_verdict* verdicts =
      expected ? r.ws.verdicts.as<frame_verdict>(jobs.size(), r.mem) : nullptr;
  std::size_t launched = 0;
  status refused;  // a decode that returned an error at once, after the launched ones
  for (std::size_t q = 0; q < jobs.size() && !r.failed() && refused.ok(); ++q) {
    const frame_decode& j = jobs[q];
    const operation op = j.accumulate ? operation::decode_accumulate : operation::decode;
    auto ws = codec_scratch(r, r.cfg.spec, j.out, op);
    if (r.failed() || !frame_aligned(r, j.frame.data())) break;
    if (!expected) {
      const status st = j.accumulate ? decode_accumulate(j.frame, j.out, r.alpha, r.exec(ws))
                                     : decode(j.frame, j.out, r.exec(ws));
      if (!st.ok()) r.fail(st);
      continue;
    }
    refused = j.accumulate ? decode_accumulate_expected(headers[q], j.frame, j.out, r.alpha,
                                                        verdicts + q, r.exec(ws))
                           : decode_expected(headers[q], j.frame, j.out, verdicts + q, r.exec(ws));
    if (refused.ok()) launched = q + 1;  // its verdict will be written
  }
  if (launched > 0) {
    // The one wait: every verdict at once; in frame order, the first failure is the rank's.
    std::vector<frame_verdict> seen(launched);
    if (auto st = r.mem.download(seen.data(), verdicts, launched * sizeof(frame_verdict)); !st.ok())
      return st;  // the memory (the communicator's stream) failed: as a failed block copy
    for (const frame_verdict& v : seen)
      if (auto st = verdict_status(v); !st.ok()) {
        r.fail(st);
        return {};
      }
  }
  if (!refused.ok()) r.fail(refused);
  return {};
}

void count_traffic(run& r, std::uint64_t sent, std::uint64_t received) {
  if (r.times == nullptr) return;
  r.times->bytes_sent += sent;
  r.times->bytes_received += received;
  r.times->collectives += 1;
}

status wait(run& r, request& req) {
  timer t(r.times, &phase_times::comm_s);
  return r.comm.wait(req);
}

status drive(run& r, program& p) {
  const int k_last = p.exchanges();
  const std::uint64_t n_seg = r.segments;
  // On device memory every host copy of a block header waits for the whole stream, the
  // next segment's transfer included, so staggering would overlap nothing; it would also
  // allocate while a transfer is in flight, which can deadlock several GPUs of a process.
  const bool staggered = r.cfg.pipeline && n_seg > 1 && r.mem.space() == memory_space::host;
  const std::size_t need = staggered ? static_cast<std::size_t>(k_last) + 1 : 1;
  if (r.ws.slots.size() < need) r.ws.slots.resize(need);
  status fatal;
  auto step = [&](int k, std::uint64_t i, slot& s) {
    if (fatal.ok()) fatal = p.stage(r, k, i, s);
  };
  if (!staggered) {
    for (std::uint64_t i = 0; i < n_seg && fatal.ok(); ++i)
      for (int k = 0; k <= k_last; ++k) step(k, i, r.ws.slots[0]);
  } else {
    const auto depth = static_cast<std::uint64_t>(k_last);
    for (std::uint64_t t = 0; t < n_seg + depth && fatal.ok(); ++t)
      for (int k = 0; k <= k_last; ++k) {
        const auto kk = static_cast<std::uint64_t>(k);
        if (t >= kk && t - kk < n_seg) step(k, t - kk, r.ws.slots[(t - kk) % (depth + 1)]);
      }
  }
  if (!fatal.ok()) {
    // Leave no transfer running into memory the caller may free.
    for (auto& s : r.ws.slots) (void)r.comm.wait(s.req);
    return fatal;
  }
  return {};
}

}  // namespace gradcodec::comm::detail
