// SPDX-License-Identifier: Apache-2.0
//! @file
//! The allgather strategy (every codec) and the signSGD majority vote: each rank encodes
//! its segment once, the frames are allgathered, and every rank decode-accumulates all of
//! them in rank order (or takes gradcodec::sign_majority_vote of them), so every rank
//! computes the same bytes.
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
#include "gradcodec/vote.hpp"

namespace gradcodec::comm::detail {

namespace {

class allgather_program final : public program {
 public:
  explicit allgather_program(bool vote) : vote_(vote) {}
  [[nodiscard]] int exchanges() const noexcept override { return 1; }

  status stage(run& r, int k, std::uint64_t i, slot& s) override {
    return k == 0 ? start(r, i, s) : finish(r, i, s);
  }

 private:
  // Threshold's bound is the dense worst case: exchange the sizes first instead of padding.
  static bool variable(const run& r) { return blocks::traits_of(r.cfg.spec.id).size_from_data; }

  static std::uint64_t capacity(const run& r, const segment& g) {
    return encode_bound(r.cfg.spec, g.len, r.in.type, g.rows);
  }
  //! A block: the header and the frame's capacity, padded.
  static std::uint64_t block_of(const run& r, const segment& g) {
    return block_header + padded(capacity(r, g));
  }

  status start(run& r, std::uint64_t i, slot& s) {
    const segment g = r.seg(i);
    const std::uint64_t cap = capacity(r, g), block = block_of(r, g);
    const auto w = static_cast<std::uint64_t>(r.world);
    std::byte* send = s.send.reserve(block, r.mem);
    std::uint64_t bytes = 0;
    if (!r.failed()) {
      timer t(r.times, &phase_times::encode_s);
      const const_tensor_view in = slice(r.in, g.offset, g.len, g.rows);
      const context fctx = frame_context(r, role_worker, i, 0);
      const tensor_view res =
          r.error_feedback ? f32_view(r.worker_residual + g.offset, g.len, g.rows) : tensor_view{};
      bytes = encode_frame(r, fctx, in, res, {send + block_header, cap});
    }
    if (r.failed()) bytes = 0;
    if (auto st = put_block(r, send, r.poison, bytes); !st.ok()) return st;
    if (!variable(r)) {
      std::byte* recv = s.recv.reserve(w * block, r.mem);
      count_traffic(r, block, w * block);
      timer t(r.times, &phase_times::comm_s);
      return r.comm.iallgather(send, block, recv, s.req);
    }
    // Variable size: the headers go first, then exactly the announced bytes.
    const std::uint64_t caps[] = {cap};
    return post_variable_allgather(r, s, send, bytes, caps, s.recv, s.recv_sizes);
  }

  status finish(run& r, std::uint64_t i, slot& s) {
    if (auto st = wait(r, s.req); !st.ok()) return st;
    const segment g = r.seg(i);
    const std::uint64_t cap = capacity(r, g), block = block_of(r, g);
    const auto w = static_cast<std::uint64_t>(r.world);
    // Locate the frames (reading every header first: an error word anywhere stops all).
    // On device memory the frame headers come along (not for the variable-size frames,
    // whose block headers travelled apart; nor for the vote, which reads frames on the host).
    auto& off = s.offsets;
    auto& len = s.lengths;
    off.assign(w, 0);
    s.expected.clear();
    if (variable(r)) {
      len = s.frame_bytes;
      for (std::uint64_t q = 1; q < w; ++q) off[q] = off[q - 1] + s.recv_sizes[q - 1];
    } else {
      for (std::uint64_t q = 0; q < w; ++q) off[q] = q * block;
      const std::uint64_t caps[] = {cap};
      if (auto st =
              read_blocks(r, s.recv.data(), off, caps, len, vote_ ? nullptr : device_headers(r, s));
          !st.ok())
        return st;
      for (std::uint64_t q = 0; q < w; ++q) off[q] += block_header;
    }
    if (r.failed()) return {};
    timer t(r.times, &phase_times::decode_s);
    if (vote_) return vote(r, g, s);
    const bool direct = r.out.type == dtype::f32;
    float* acc = direct ? static_cast<float*>(r.out.data) + g.offset
                        : r.ws.accum.as<float>(g.len + 1, r.mem);
    if (auto st = r.mem.zero(acc, g.len * 4); !st.ok()) return st;
    const tensor_view accv = f32_view(acc, g.len, g.rows);
    auto& jobs = r.ws.decodes;
    jobs.clear();
    for (std::uint64_t q = 0; q < w; ++q)
      jobs.push_back({{s.recv.data() + off[q], len[q]}, accv, true});
    if (auto st = decode_frames(r, jobs, s.expected); !st.ok()) return st;
    if (r.failed() || direct) return {};
    return r.mem.from_f32(acc, slice(r.out, g.offset, g.len));
  }

  //! The vote runs on the host: device frames and the result are copied across.
  static status vote(run& r, const segment& g, slot& s) {
    const auto w = static_cast<std::uint64_t>(r.world);
    const bool host = r.mem.space() == memory_space::host;
    const std::byte* frames_at = s.recv.data();
    const std::uint64_t total = s.offsets[w - 1] + s.lengths[w - 1];
    const std::uint64_t out_bytes = g.len * dtype_size(r.out.type);
    const std::uint64_t frames_offset = (out_bytes + 63) / 64 * 64;  // the result first, aligned
    if (!host) {
      r.ws.host.resize(frames_offset + total);
      if (auto st = r.mem.download(r.ws.host.data() + frames_offset, frames_at, total); !st.ok())
        return st;
      frames_at = r.ws.host.data() + frames_offset;
    }
    auto& frames = r.ws.vote.frames;
    frames.clear();
    for (std::uint64_t q = 0; q < w; ++q)
      frames.emplace_back(frames_at + s.offsets[q], s.lengths[q]);
    const tensor_view dst =
        host ? slice(r.out, g.offset, g.len) : tensor_view{r.ws.host.data(), g.len, r.out.type, 0};
    if (auto st = sign_majority_vote(frames, dst, 1.0f); !st.ok()) {
      r.fail(st);
      return {};
    }
    if (host) return {};
    return r.mem.upload(slice(r.out, g.offset, g.len).data, dst.data, out_bytes);
  }

  bool vote_;
};

}  // namespace

status run_allgather(run& r) {
  allgather_program p(false);
  return drive(r, p);
}

status run_majority_vote(run& r) {
  allgather_program p(true);
  return drive(r, p);
}

}  // namespace gradcodec::comm::detail
