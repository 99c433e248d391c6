// SPDX-License-Identifier: Apache-2.0
//! @file
//! The dense strategy of random-k: every rank derives the same k indices from the shared
//! context, so only the k values are reduced (reduce-scatter, owner sums in rank order,
//! allgather). Each rank writes the mean values into its own frame and decodes it.
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
#include "gradcodec/blocks/layout.hpp"

namespace gradcodec::comm::detail {

namespace {

class randomk_program final : public program {
 public:
  [[nodiscard]] int exchanges() const noexcept override { return 2; }

  status stage(run& r, int k, std::uint64_t i, slot& s) override {
    if (k == 0) return scatter(r, i, s);
    if (k == 1) return reduce(r, i, s);
    return gather(r, i, s);
  }

 private:
  static std::uint64_t vsize(const run& r) { return dtype_size(r.in.type); }
  static std::uint64_t values_at() {
    return header_bytes + blocks::randomk_layout_of(0, 4).values_offset;
  }

  //! The header of the frame at `frame` (in the communicator's memory).
  static result<frame_header> header_of(run& r, const std::byte* frame) {
    std::byte h[header_bytes];
    if (auto st = r.mem.download(h, frame, header_bytes); !st.ok()) return st;
    return peek({h, header_bytes});
  }

  status scatter(run& r, std::uint64_t i, slot& s) {
    const segment g = r.seg(i);
    const auto w = static_cast<std::size_t>(r.world);
    const std::uint64_t k = sparse_count(r.cfg.spec, g.len), vs = vsize(r);
    const std::uint64_t cap = encode_bound(r.cfg.spec, g.len, r.in.type);
    std::byte* frame = s.frame.reserve(cap, r.mem);
    if (!r.failed()) {
      timer t(r.times, &phase_times::encode_s);
      const const_tensor_view in = slice(r.in, g.offset, g.len);
      const context fctx = frame_context(r, role_worker, i, 0);
      const tensor_view res =
          r.error_feedback ? f32_view(r.worker_residual + g.offset, g.len) : tensor_view{};
      const std::uint64_t written = encode_frame(r, fctx, in, res, {frame, cap});
      if (!r.failed()) {
        auto h = header_of(r, frame);
        if (written < header_bytes || !h || h.value().count != k || h.value().type != r.in.type)
          r.fail(
              {status_code::internal_error, "randomk frame does not hold the expected k values"});
      }
    }
    s.send_sizes.assign(w, 0);
    std::uint64_t total = 0;
    for (std::size_t d = 0; d < w; ++d) {
      s.send_sizes[d] = block_header + chunk_of(k, 1, r.world, static_cast<int>(d)).len * vs;
      total += s.send_sizes[d];
    }
    std::byte* send = s.send.reserve(total, r.mem);
    std::uint64_t at = 0;
    for (std::size_t d = 0; d < w; ++d) {
      const range c = chunk_of(k, 1, r.world, static_cast<int>(d));
      if (auto st = put_block(r, send + at, r.poison, c.len * vs); !st.ok()) return st;
      if (!r.failed() && c.len > 0)
        if (auto st = r.mem.copy(send + at + block_header, frame + values_at() + c.begin * vs,
                                 c.len * vs);
            !st.ok())
          return st;
      at += s.send_sizes[d];
    }
    const std::uint64_t mine = chunk_of(k, 1, r.world, r.me).len;
    s.recv_sizes.assign(w, block_header + mine * vs);
    std::byte* recv = s.recv.reserve(w * (block_header + mine * vs), r.mem);
    count_traffic(r, total, w * (block_header + mine * vs));
    timer t(r.times, &phase_times::comm_s);
    return r.comm.ialltoallv(send, s.send_sizes, recv, s.recv_sizes, s.req);
  }

  status reduce(run& r, std::uint64_t i, slot& s) {
    if (auto st = wait(r, s.req); !st.ok()) return st;
    const segment g = r.seg(i);
    const auto w = static_cast<std::size_t>(r.world);
    const std::uint64_t k = sparse_count(r.cfg.spec, g.len), vs = vsize(r);
    const range mine = chunk_of(k, 1, r.world, r.me);
    const std::uint64_t block = block_header + mine.len * vs;
    s.offsets.resize(w);
    for (std::size_t q = 0; q < w; ++q) s.offsets[q] = q * block;
    const std::uint64_t caps[] = {mine.len * vs};
    if (auto st = read_blocks(r, s.recv.data(), s.offsets, caps, s.lengths); !st.ok()) return st;
    std::byte* send = s.server_send.reserve(block, r.mem);
    if (!r.failed()) {
      // The mean of each value over the ranks in rank order, in the input's dtype.
      timer t(r.times, &phase_times::reduce_s);
      float* acc = r.ws.accum.as<float>(mine.len + 1, r.mem);
      if (auto st = r.mem.zero(acc, mine.len * 4); !st.ok()) return st;
      for (std::size_t q = 0; q < w; ++q) {
        const const_tensor_view v{s.recv.data() + q * block + block_header, mine.len, r.in.type, 0};
        if (auto st = r.mem.accumulate(v, r.alpha, r.alpha, mine.len, acc); !st.ok()) return st;
      }
      if (auto st = r.mem.from_f32(acc, {send + block_header, mine.len, r.in.type, 0}); !st.ok())
        return st;
    }
    if (auto st = put_block(r, send, r.poison, mine.len * vs); !st.ok()) return st;
    s.server_sizes.assign(w, 0);
    std::uint64_t total = 0;
    for (std::size_t c = 0; c < w; ++c) {
      s.server_sizes[c] = block_header + chunk_of(k, 1, r.world, static_cast<int>(c)).len * vs;
      total += s.server_sizes[c];
    }
    std::byte* recv = s.server_recv.reserve(total, r.mem);
    count_traffic(r, block, total);
    timer t(r.times, &phase_times::comm_s);
    return r.comm.iallgatherv(send, block, recv, s.server_sizes, s.req);
  }

  status gather(run& r, std::uint64_t i, slot& s) {
    if (auto st = wait(r, s.req); !st.ok()) return st;
    const segment g = r.seg(i);
    const auto w = static_cast<std::size_t>(r.world);
    const std::uint64_t k = sparse_count(r.cfg.spec, g.len), vs = vsize(r);
    std::byte* frame = s.frame.data();
    s.offsets.assign(w, 0);
    auto& caps = s.caps;
    caps.assign(w, 0);
    for (std::size_t c = 0; c < w; ++c) {
      if (c > 0) s.offsets[c] = s.offsets[c - 1] + s.server_sizes[c - 1];
      caps[c] = s.server_sizes[c] - block_header;
    }
    if (auto st = read_blocks(r, s.server_recv.data(), s.offsets, caps, s.lengths); !st.ok())
      return st;
    if (r.failed()) return {};
    for (std::size_t c = 0; c < w; ++c) {
      const range ch = chunk_of(k, 1, r.world, static_cast<int>(c));
      if (ch.len > 0)
        if (auto st = r.mem.copy(frame + values_at() + ch.begin * vs,
                                 s.server_recv.data() + s.offsets[c] + block_header, ch.len * vs);
            !st.ok())
          return st;
    }
    timer t(r.times, &phase_times::decode_s);
    const tensor_view dst = slice(r.out, g.offset, g.len);
    auto h = header_of(r, frame);
    if (!h) {
      r.fail(h.error());
      return {};
    }
    auto ws = codec_scratch(r, r.cfg.spec, dst, operation::decode);
    if (auto st = decode({frame, h.value().frame_bytes()}, dst, r.exec(ws)); !st.ok()) r.fail(st);
    return {};
  }
};

}  // namespace

status run_randomk_dense(run& r) {
  randomk_program p;
  return drive(r, p);
}

}  // namespace gradcodec::comm::detail
