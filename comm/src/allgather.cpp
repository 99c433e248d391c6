// SPDX-License-Identifier: Apache-2.0
//! @file
//! The allgather strategy (every codec) and the signSGD majority vote: each rank encodes
//! its segment once, the frames are allgathered, and every rank decode-accumulates all of
//! them in rank order (or takes gradcodec::sign_majority_vote of them), so every rank
//! computes the same bytes.
#include "gradcodec/vote.hpp"
#include "internal.hpp"

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
  static bool variable(const run& r) { return r.cfg.spec.id == codec_id::threshold; }

  static std::uint64_t capacity(const run& r, const segment& g) {
    return encode_bound(r.cfg.spec, g.len, r.in.type, g.rows);
  }

  status start(run& r, std::uint64_t i, slot& s) {
    const segment g = r.seg(i);
    const std::uint64_t cap = capacity(r, g);
    const auto w = static_cast<std::uint64_t>(r.world);
    std::byte* send = s.send.reserve(block_header + cap);
    std::uint64_t bytes = 0;
    if (!r.failed()) {
      timer t(r.times, &phase_times::encode_s);
      const const_tensor_view in = slice(r.in, g.offset, g.len, g.rows);
      const context fctx = frame_context(r, role_worker, i, 0);
      const tensor_view res = r.error_feedback
                                  ? f32_view(r.st.worker_residual.data() + g.offset, g.len, g.rows)
                                  : tensor_view{};
      bytes = encode_frame(r, fctx, in, res, {send + block_header, cap});
    }
    if (r.failed()) bytes = 0;
    put_block(send, r.poison, bytes);
    if (!variable(r)) {
      std::byte* recv = s.recv.reserve(w * (block_header + cap));
      count_traffic(r, block_header + cap, w * (block_header + cap));
      timer t(r.times, &phase_times::comm_s);
      return r.comm.iallgather(send, block_header + cap, recv, s.req);
    }
    // Variable size: the headers go first, then exactly the announced bytes.
    s.headers_in.resize(w * block_header);
    {
      timer t(r.times, &phase_times::comm_s);
      count_traffic(r, block_header, w * block_header);
      if (auto st = r.comm.allgather(send, block_header, s.headers_in.data()); !st.ok()) return st;
    }
    s.recv_sizes.assign(w, 0);
    std::uint64_t total = 0;
    for (std::uint64_t q = 0; q < w; ++q) {
      s.recv_sizes[q] = read_block(r, s.headers_in.data() + q * block_header, cap);
      total += s.recv_sizes[q];
    }
    std::byte* recv = s.recv.reserve(total + 1);
    count_traffic(r, bytes, total);
    timer t(r.times, &phase_times::comm_s);
    return r.comm.iallgatherv(send + block_header, bytes, recv, s.recv_sizes, s.req);
  }

  status finish(run& r, std::uint64_t i, slot& s) {
    if (auto st = wait(r, s.req); !st.ok()) return st;
    const segment g = r.seg(i);
    const std::uint64_t cap = capacity(r, g);
    const auto w = static_cast<std::uint64_t>(r.world);
    // Locate the frames (reading every header first: an error word anywhere stops all).
    auto& off = s.offsets;
    auto& len = s.lengths;
    off.assign(w, 0);
    len.assign(w, 0);
    std::uint64_t at = 0;
    for (std::uint64_t q = 0; q < w; ++q) {
      if (variable(r)) {
        off[q] = at;
        len[q] = s.recv_sizes[q];
        at += len[q];
      } else {
        off[q] = q * (block_header + cap) + block_header;
        len[q] = read_block(r, s.recv.data() + q * (block_header + cap), cap);
      }
    }
    if (r.failed()) return {};
    timer t(r.times, &phase_times::decode_s);
    if (vote_) {
      auto& frames = r.ws.frames;
      frames.clear();
      for (std::uint64_t q = 0; q < w; ++q) frames.emplace_back(s.recv.data() + off[q], len[q]);
      if (auto st = sign_majority_vote(frames, slice(r.out, g.offset, g.len), 1.0f); !st.ok())
        r.fail(st);
      return {};
    }
    const bool direct = r.out.type == dtype::f32;
    float* acc =
        direct ? static_cast<float*>(r.out.data) + g.offset : r.ws.accum.as<float>(g.len + 1);
    for (std::uint64_t j = 0; j < g.len; ++j) acc[j] = 0.0f;
    const tensor_view accv = f32_view(acc, g.len, g.rows);
    auto ws = codec_scratch(r, r.cfg.spec, accv, operation::decode_accumulate);
    for (std::uint64_t q = 0; q < w && !r.failed(); ++q) {
      const const_bytes frame{s.recv.data() + off[q], len[q]};
      if (auto st = decode_accumulate(frame, accv, r.alpha, r.exec(ws)); !st.ok()) r.fail(st);
    }
    if (r.failed()) return {};
    if (!direct)
      for (std::uint64_t j = 0; j < g.len; ++j) store(r.out, g.offset + j, acc[j]);
    return {};
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
