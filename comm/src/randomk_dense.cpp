// SPDX-License-Identifier: Apache-2.0
//! @file
//! The dense strategy of random-k: every rank derives the same k indices from the shared
//! context, so only the k values are reduced (reduce-scatter, owner sums in rank order,
//! allgather). Each rank writes the mean values into its own frame and decodes it.
#include <cmath>

#include "gradcodec/blocks/layout.hpp"
#include "internal.hpp"

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

  status scatter(run& r, std::uint64_t i, slot& s) {
    const segment g = r.seg(i);
    const auto w = static_cast<std::size_t>(r.world);
    const std::uint64_t k = sparse_count(r.cfg.spec, g.len), vs = vsize(r);
    const std::uint64_t cap = encode_bound(r.cfg.spec, g.len, r.in.type);
    std::byte* frame = s.frame.reserve(cap);
    if (!r.failed()) {
      timer t(r.times, &phase_times::encode_s);
      const const_tensor_view in = slice(r.in, g.offset, g.len);
      const context fctx = frame_context(r, role_worker, i, 0);
      const tensor_view res = r.error_feedback
                                  ? f32_view(r.st.worker_residual.data() + g.offset, g.len)
                                  : tensor_view{};
      const std::uint64_t written = encode_frame(r, fctx, in, res, {frame, cap});
      if (!r.failed()) {
        auto h = peek({frame, written});
        if (!h || h.value().count != k || h.value().type != r.in.type)
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
    std::byte* send = s.send.reserve(total);
    std::uint64_t at = 0;
    for (std::size_t d = 0; d < w; ++d) {
      const range c = chunk_of(k, 1, r.world, static_cast<int>(d));
      put_block(send + at, r.poison, c.len * vs);
      if (!r.failed() && c.len > 0)
        std::memcpy(send + at + block_header, frame + values_at() + c.begin * vs, c.len * vs);
      at += s.send_sizes[d];
    }
    const std::uint64_t mine = chunk_of(k, 1, r.world, r.me).len;
    s.recv_sizes.assign(w, block_header + mine * vs);
    std::byte* recv = s.recv.reserve(w * (block_header + mine * vs));
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
    for (std::size_t q = 0; q < w; ++q)
      (void)read_block(r, s.recv.data() + q * (block_header + mine.len * vs), mine.len * vs);
    std::byte* send = s.server_send.reserve(block_header + mine.len * vs);
    if (!r.failed()) {
      timer t(r.times, &phase_times::reduce_s);
      const tensor_view sum{send + block_header, mine.len, r.in.type, 0};
      for (std::uint64_t j = 0; j < mine.len; ++j) {
        float acc = 0.0f;
        for (std::size_t q = 0; q < w; ++q) {
          const const_tensor_view v{
              s.recv.data() + q * (block_header + mine.len * vs) + block_header, mine.len,
              r.in.type, 0};
          acc = std::fma(r.alpha, load(v, j), acc);
        }
        store(sum, j, acc);
      }
    }
    put_block(send, r.poison, mine.len * vs);
    s.server_sizes.assign(w, 0);
    std::uint64_t total = 0;
    for (std::size_t c = 0; c < w; ++c) {
      s.server_sizes[c] = block_header + chunk_of(k, 1, r.world, static_cast<int>(c)).len * vs;
      total += s.server_sizes[c];
    }
    std::byte* recv = s.server_recv.reserve(total);
    count_traffic(r, block_header + mine.len * vs, total);
    timer t(r.times, &phase_times::comm_s);
    return r.comm.iallgatherv(send, block_header + mine.len * vs, recv, s.server_sizes, s.req);
  }

  status gather(run& r, std::uint64_t i, slot& s) {
    if (auto st = wait(r, s.req); !st.ok()) return st;
    const segment g = r.seg(i);
    const auto w = static_cast<std::size_t>(r.world);
    const std::uint64_t k = sparse_count(r.cfg.spec, g.len), vs = vsize(r);
    std::byte* frame = s.frame.data();
    std::uint64_t at = 0;
    for (std::size_t c = 0; c < w; ++c) {
      const range ch = chunk_of(k, 1, r.world, static_cast<int>(c));
      (void)read_block(r, s.server_recv.data() + at, ch.len * vs);
      if (!r.failed() && ch.len > 0)
        std::memcpy(frame + values_at() + ch.begin * vs, s.server_recv.data() + at + block_header,
                    ch.len * vs);
      at += s.server_sizes[c];
    }
    if (r.failed()) return {};
    timer t(r.times, &phase_times::decode_s);
    const tensor_view dst = slice(r.out, g.offset, g.len);
    auto h = peek({frame, header_bytes});
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
