// SPDX-License-Identifier: Apache-2.0
//! @file
//! The dense strategy of PowerSGD: the phases of gradcodec/powersgd.hpp around two
//! deterministic reductions. P of every factorised tensor and the values of every other
//! tensor travel in one reduction, Q of every factorised tensor in a second one.
#include <span>

#include "comm/src/chunks.hpp"
#include "comm/src/collectives.hpp"
#include "comm/src/contexts.hpp"
#include "comm/src/dense_reduce.hpp"
#include "comm/src/run.hpp"
#include "comm/src/slices.hpp"
#include "comm/src/strategies/strategies.hpp"
#include "comm/src/workspace.hpp"
#include "gradcodec/powersgd.hpp"

namespace gradcodec::comm::detail {

std::uint64_t powersgd_q_size(const codec_spec& spec, std::span<const tensor_slot> pieces) {
  std::uint64_t q = 0;
  for (const auto& p : pieces) {
    const powersgd_factors f = powersgd_factors_of(spec, p.rows, p.n);
    if (f.compressed) q += f.cols * f.rank;
  }
  return q;
}

status run_powersgd_dense(run& r) {
  const codec_spec& spec = r.cfg.spec;
  std::uint64_t p_total = 0, dense_total = 0, q_total = 0;
  for (std::uint64_t t = 0; t < r.segments; ++t) {
    const segment g = r.seg(t);
    const powersgd_factors f = powersgd_factors_of(spec, g.rows, g.len);
    if (f.compressed) {
      p_total += f.rows * f.rank;
      q_total += f.cols * f.rank;
    } else {
      dense_total += g.len;
    }
  }
  float* values = r.ws.powersgd.values.as<float>(p_total + dense_total + 1, r.mem);
  float* q = r.q;
  float* residual = r.worker_residual;
  const exec_options opt = r.exec({});

  auto for_each = [&](auto&& fn) {
    std::uint64_t p_at = 0, q_at = 0, d_at = p_total;
    for (std::uint64_t t = 0; t < r.segments && !r.failed(); ++t) {
      const segment g = r.seg(t);
      const powersgd_factors f = powersgd_factors_of(spec, g.rows, g.len);
      fn(t, g, f, p_at, q_at, d_at);
      if (f.compressed) {
        p_at += f.rows * f.rank;
        q_at += f.cols * f.rank;
      } else {
        d_at += g.len;
      }
    }
  };

  // P = M Q for each factorised tensor (Q from the shared seed on the first step); the
  // other tensors' values go beside the P factors.
  if (!r.failed()) {
    timer t(r.times, &phase_times::encode_s);
    for_each([&](std::uint64_t ti, const segment& g, const powersgd_factors& f, std::uint64_t p_at,
                 std::uint64_t q_at, std::uint64_t d_at) {
      if (!f.compressed) {
        if (auto st = r.mem.to_f32(slice(r.in, g.offset, g.len), 1.0f, values + d_at); !st.ok())
          r.fail(st);
        return;
      }
      const std::span<float> qs{q + q_at, f.cols * f.rank};
      if (!r.st.q_ready) {
        const context tctx = derive(r.ctx, role_tensor, ti, 0, shared_rank);
        if (auto st = powersgd_init_q(spec, tctx, f.rows, f.cols, qs, opt); !st.ok())
          return r.fail(st);
      }
      if (auto st = powersgd_compute_p(spec, slice(r.in, g.offset, g.len, g.rows),
                                       {residual + g.offset, g.len}, qs,
                                       {values + p_at, f.rows * f.rank}, opt);
          !st.ok())
        r.fail(st);
    });
  }
  // Sum of P (scale is irrelevant: it is orthogonalised), mean of the dense values.
  if (auto st = dense_reduce(r, values, p_total + dense_total, p_total, 1.0f, r.alpha); !st.ok())
    return st;
  if (!r.failed()) {
    // Q = M^T orth(P): every P orthogonalised in one batch (one launch on a GPU for up to
    // 64 layers), then the products; the same bits as powersgd_compute_q per tensor.
    timer t(r.times, &phase_times::encode_s);
    auto& batch = r.ws.powersgd.matrices;
    batch.clear();
    for_each([&](std::uint64_t, const segment&, const powersgd_factors& f, std::uint64_t p_at,
                 std::uint64_t, std::uint64_t) {
      if (f.compressed) batch.push_back({{values + p_at, f.rows * f.rank}, f.rows, f.rank});
    });
    if (auto st = powersgd_orthogonalize_batch(batch, spec.eps, opt); !st.ok()) r.fail(st);
    for_each([&](std::uint64_t, const segment& g, const powersgd_factors& f, std::uint64_t p_at,
                 std::uint64_t q_at, std::uint64_t) {
      if (!f.compressed) return;
      if (auto st = powersgd_project_q(spec, {values + p_at, f.rows * f.rank},
                                       {residual + g.offset, g.len}, f.rows, f.cols,
                                       {q + q_at, f.cols * f.rank}, opt);
          !st.ok())
        r.fail(st);
    });
  }
  if (auto st = dense_reduce(r, q, q_total, q_total, 1.0f, 1.0f); !st.ok()) return st;
  if (r.failed()) return {};
  timer t(r.times, &phase_times::decode_s);
  for_each([&](std::uint64_t, const segment& g, const powersgd_factors& f, std::uint64_t p_at,
               std::uint64_t q_at, std::uint64_t d_at) {
    const tensor_view out = slice(r.out, g.offset, g.len, g.rows);
    if (!f.compressed) {
      if (auto st = r.mem.from_f32(values + d_at, out); !st.ok()) r.fail(st);
      return;
    }
    if (auto st =
            powersgd_finish(spec, {values + p_at, f.rows * f.rank}, {q + q_at, f.cols * f.rank},
                            r.mean_over, r.error_feedback, {residual + g.offset, g.len}, out, opt);
        !st.ok())
      r.fail(st);
  });
  if (!r.failed()) r.st.q_ready = true;
  return {};
}

}  // namespace gradcodec::comm::detail
