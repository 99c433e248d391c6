// SPDX-License-Identifier: Apache-2.0
//! @file
//! The two-phase strategy (CNTK 1-bit SGD, DeepSpeed compressed allreduce, CGX): each rank
//! encodes W chunks of the segment (worker error feedback) and alltoallv's them; the owner
//! of a chunk decode-accumulates it from every rank in rank order, re-encodes the mean
//! with its own server residual, and the owners' frames are allgathered and decoded by
//! every rank. The dense strategy of fp16/bf16 is the same program with the input divided
//! by W before the cast, plain sums at the owner and no server residual.
#include "comm/src/buffers.hpp"
#include "comm/src/chunks.hpp"
#include "comm/src/collectives.hpp"
#include "comm/src/contexts.hpp"
#include "comm/src/pipeline.hpp"
#include "comm/src/run.hpp"
#include "comm/src/slices.hpp"
#include "comm/src/strategies/strategies.hpp"
#include "comm/src/wire_blocks.hpp"
#include "comm/src/workspace.hpp"
#include "gradcodec/blocks/codec_traits.hpp"

namespace gradcodec::comm::detail {

namespace {

class two_phase_program final : public program {
 public:
  [[nodiscard]] int exchanges() const noexcept override { return 2; }

  status stage(run& r, int k, std::uint64_t i, slot& s) override {
    if (k == 0) return scatter(r, i, s);
    if (k == 1) return reduce(r, i, s);
    return gather(r, i, s);
  }

 private:
  static bool variable(const run& r) { return blocks::traits_of(r.cfg.spec.id).size_from_data; }
  static bool prescaled(const run& r) { return r.divisor != 1.0f; }
  static dtype worker_type(const run& r) { return prescaled(r) ? dtype::f32 : r.in.type; }
  static bool server_feedback(const run& r) {
    return r.error_feedback && r.how == strategy::two_phase;
  }
  static std::uint64_t worker_cap(const run& r, std::uint64_t len) {
    return len > 0 ? encode_bound(r.cfg.spec, len, worker_type(r)) : 0;
  }
  static std::uint64_t server_cap(const run& r, std::uint64_t len) {
    return len > 0 ? encode_bound(r.cfg.spec, len, dtype::f32) : 0;
  }
  static range chunk(const run& r, const segment& g, int c) {
    return chunk_of(g.len, r.unit, r.world, c);
  }

  //! Encodes chunk d of segment i at dst; returns the frame bytes (0 after a failure).
  static std::uint64_t encode_chunk(run& r, std::uint64_t i, const segment& g, int d,
                                    std::byte* dst, std::uint64_t cap) {
    const range ch = chunk(r, g, d);
    if (r.failed() || ch.len == 0) return 0;
    const_tensor_view src = slice(r.in, g.offset + ch.begin, ch.len);
    if (prescaled(r)) {
      float* p = r.ws.prescaled.as<float>(ch.len + 1, r.mem);
      if (auto st = r.mem.to_f32(src, r.divisor, p); !st.ok()) {
        r.fail(st);
        return 0;
      }
      src = {p, ch.len, dtype::f32, 0};
    }
    const context fctx = frame_context(r, role_worker, i, static_cast<std::uint64_t>(d));
    const tensor_view res = r.error_feedback
                                ? f32_view(r.worker_residual + g.offset + ch.begin, ch.len)
                                : tensor_view{};
    return encode_frame(r, fctx, src, res, {dst, cap});
  }

  //! Reads the headers of the blocks of `sizes` packed from base (each one's capacity is
  //! its size less the header) into lengths, and points offsets at their frames. On device
  //! memory the frame headers behind them come along into s.expected.
  static status locate(run& r, const std::byte* base, std::span<const std::uint64_t> sizes,
                       slot& s) {
    const std::size_t w = sizes.size();
    s.offsets.assign(w, 0);
    auto& caps = s.caps;
    caps.assign(w, 0);
    for (std::size_t q = 0; q < w; ++q) {
      if (q > 0) s.offsets[q] = s.offsets[q - 1] + sizes[q - 1];
      caps[q] = sizes[q] - block_header;
    }
    if (auto st = read_blocks(r, base, s.offsets, caps, s.lengths, device_headers(r, s)); !st.ok())
      return st;
    for (auto& o : s.offsets) o += block_header;
    return {};
  }

  //! Variable size: the frames arrived back to back in blocks of `sizes` (padded), their
  //! lengths in s.frame_bytes.
  static void packed(std::span<const std::uint64_t> sizes, slot& s) {
    s.expected.clear();  // the frames' own headers are read as they are decoded
    s.offsets.assign(sizes.size(), 0);
    s.lengths = s.frame_bytes;
    for (std::size_t q = 1; q < sizes.size(); ++q) s.offsets[q] = s.offsets[q - 1] + sizes[q - 1];
  }

  status scatter(run& r, std::uint64_t i, slot& s) {
    const segment g = r.seg(i);
    const auto w = static_cast<std::size_t>(r.world);
    s.send_sizes.assign(w, 0);
    s.announced.assign(w, 0);
    std::uint64_t total = 0;
    for (std::size_t d = 0; d < w; ++d) {
      s.send_sizes[d] = block_header + padded(worker_cap(r, chunk(r, g, static_cast<int>(d)).len));
      total += s.send_sizes[d];
    }
    std::byte* send = s.send.reserve(total, r.mem);
    {
      timer t(r.times, &phase_times::encode_s);
      std::uint64_t at = 0;
      for (std::size_t d = 0; d < w; ++d) {
        s.announced[d] = encode_chunk(r, i, g, static_cast<int>(d), send + at + block_header,
                                      s.send_sizes[d] - block_header);
        at += s.send_sizes[d];
      }
      // Headers last: a failure on any chunk reaches every destination.
      at = 0;
      for (std::size_t d = 0; d < w; ++d) {
        if (r.failed()) s.announced[d] = 0;
        if (auto st = put_block(r, send + at, r.poison, s.announced[d]); !st.ok()) return st;
        at += s.send_sizes[d];
      }
    }
    const std::uint64_t rcap = worker_cap(r, chunk(r, g, r.me).len);
    s.recv_sizes.assign(w, block_header + padded(rcap));
    if (!variable(r)) {
      std::byte* recv = s.recv.reserve(w * s.recv_sizes[0], r.mem);
      count_traffic(r, total, w * s.recv_sizes[0]);
      timer t(r.times, &phase_times::comm_s);
      return r.comm.ialltoallv(send, s.send_sizes, recv, s.recv_sizes, s.req);
    }
    // Variable size: the headers first, then exactly the frames.
    return post_variable_alltoall(r, s, send, s.send_sizes, s.announced, rcap, s.recv,
                                  s.recv_sizes);
  }

  status reduce(run& r, std::uint64_t i, slot& s) {
    if (auto st = wait(r, s.req); !st.ok()) return st;
    const segment g = r.seg(i);
    const auto w = static_cast<std::size_t>(r.world);
    const range mine = chunk(r, g, r.me);
    if (variable(r)) {
      packed(s.recv_sizes, s);
    } else if (auto st = locate(r, s.recv.data(), s.recv_sizes, s); !st.ok()) {
      return st;
    }
    const std::uint64_t scap = server_cap(r, mine.len);
    std::byte* send = s.server_send.reserve(block_header + padded(scap), r.mem);
    std::uint64_t bytes = 0;
    if (!r.failed() && mine.len > 0) {
      timer t(r.times, &phase_times::reduce_s);
      float* acc = r.ws.accum.as<float>(mine.len + 1, r.mem);
      if (auto st = r.mem.zero(acc, mine.len * 4); !st.ok()) return st;
      const tensor_view accv = f32_view(acc, mine.len);
      auto& jobs = r.ws.decodes;
      jobs.clear();
      for (std::size_t q = 0; q < w; ++q)
        jobs.push_back({{s.recv.data() + s.offsets[q], s.lengths[q]}, accv, true});
      if (auto st = decode_frames(r, jobs, s.expected); !st.ok()) return st;
      if (!r.failed()) {
        const context fctx = frame_context(r, role_server, i, static_cast<std::uint64_t>(r.me));
        const std::uint64_t full = chunk_of(r.seg_len, r.unit, r.world, r.me).len;
        const tensor_view res =
            server_feedback(r) ? f32_view(r.server_residual + i * full, mine.len) : tensor_view{};
        bytes = encode_frame(r, fctx, accv, res, {send + block_header, scap});
      }
    }
    if (r.failed()) bytes = 0;
    if (auto st = put_block(r, send, r.poison, bytes); !st.ok()) return st;
    s.server_sizes.assign(w, 0);
    std::uint64_t total = 0;
    for (std::size_t c = 0; c < w; ++c) {
      s.server_sizes[c] =
          block_header + padded(server_cap(r, chunk(r, g, static_cast<int>(c)).len));
      total += s.server_sizes[c];
    }
    if (!variable(r)) {
      std::byte* recv = s.server_recv.reserve(total, r.mem);
      count_traffic(r, block_header + padded(scap), total);
      timer t(r.times, &phase_times::comm_s);
      return r.comm.iallgatherv(send, block_header + padded(scap), recv, s.server_sizes, s.req);
    }
    // Variable size: the headers go first, then exactly the frames (each chunk's capacity).
    auto& caps = s.caps;
    caps.assign(w, 0);
    for (std::size_t c = 0; c < w; ++c) caps[c] = s.server_sizes[c] - block_header;
    return post_variable_allgather(r, s, send, bytes, caps, s.server_recv, s.server_sizes);
  }

  status gather(run& r, std::uint64_t i, slot& s) {
    if (auto st = wait(r, s.req); !st.ok()) return st;
    const segment g = r.seg(i);
    const auto w = static_cast<std::size_t>(r.world);
    if (variable(r)) {
      packed(s.server_sizes, s);
    } else if (auto st = locate(r, s.server_recv.data(), s.server_sizes, s); !st.ok()) {
      return st;
    }
    if (r.failed()) return {};
    timer t(r.times, &phase_times::decode_s);
    auto& jobs = r.ws.decodes;
    jobs.clear();
    std::vector<frame_header>& headers = r.ws.decode_headers;
    headers.clear();
    for (std::size_t c = 0; c < w; ++c) {
      const range ch = chunk(r, g, static_cast<int>(c));
      if (ch.len == 0) continue;
      jobs.push_back({{s.server_recv.data() + s.offsets[c], s.lengths[c]},
                      slice(r.out, g.offset + ch.begin, ch.len),
                      false});
      if (!s.expected.empty()) headers.push_back(s.expected[c]);
    }
    if (auto st = decode_frames(r, jobs, headers); !st.ok()) return st;
    return {};
  }
};

}  // namespace

status run_two_phase(run& r) {
  two_phase_program p;
  return drive(r, p);
}

}  // namespace gradcodec::comm::detail
