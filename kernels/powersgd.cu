// SPDX-License-Identifier: Apache-2.0
//! @file
//! The stateless PowerSGD codec on the GPU (docs/codecs.md "powersgd"), from the blocks of
//! blocks/powersgd.hpp (proven equal to the reference on the host):
//!
//! - Q0: one thread per entry, then the orthogonalization by one block, its rows split
//!   over up to 32 warps (block_canonical_sum: the canonical sum's bits);
//! - P = M Q0 straight into the payload: one warp per row of M (coalesced along the row),
//!   each entry a warp canonical sum; then P-hat = orth(P) in place, one block;
//! - Q = M^T P-hat: one thread per entry (j, c), a sequential canonical sum down column j
//!   (neighbouring threads read neighbouring columns: coalesced), or, for matrices with
//!   fewer entries than fill the GPU (few columns, many rows), one warp per entry: the
//!   same canonical sum split over the warp's lanes (blocks/warp.cuh);
//! - decode: one thread per output element, the r-term canonical sum of P-hat and Q.
//! A matrix that is not worth compressing is sent dense (the values as f32). Error
//! feedback is the generic composition on the device.
#include <algorithm>

#include "codecs.hpp"
#include "common.cuh"
#include "gradcodec/blocks/layout.hpp"
#include "gradcodec/blocks/powersgd.hpp"
#include "gradcodec/blocks/warp.cuh"
#include "gradcodec/powersgd.hpp"

namespace gradcodec::cuda {

namespace {

using policy::threads;

std::uint64_t align64(std::uint64_t x) { return (x + 63u) & ~std::uint64_t{63}; }

using matrix_shape = powersgd_frame_shape;
inline matrix_shape shape_of(const codec_spec& spec, const_tensor_view v) {
  return powersgd_frame_shape_of(spec, v);
}

__global__ void scan_kernel(values_in v, std::uint64_t n, status_words* st) {
  bool bad = false;
  for (std::uint64_t k = thread_index(); k < n; k += thread_stride())
    bad |= !blocks::is_finite(v(k));
  if (bad) atomicOr(&st->nonfinite, 1u);
}

__global__ void dense_kernel(values_in v, std::uint64_t n, float* out) {
  for (std::uint64_t k = thread_index(); k < n; k += thread_stride()) out[k] = v(k);
}

__global__ void init_q_kernel(blocks::counter_rng rng, std::uint64_t entries, float* q) {
  for (std::uint64_t e = thread_index(); e < entries; e += thread_stride())
    q[e] = blocks::powersgd_init_entry(rng, e);
}

//! One block: orth(a, m, r, eps).
__global__ void orth_kernel(float* a, std::uint64_t m, std::uint32_t r, float eps) {
  blocks::powersgd_orthogonalize(a, m, r, eps, blocks::block_reducer{});
}

//! orth(a, rows, r, eps) on stream s: one block, its rows split over the warps the policy
//! gives them.
void launch_orth(float* a, std::uint64_t rows, std::uint32_t r, float eps, cudaStream_t s) {
  orth_kernel<<<1, policy::split_threads(rows), 0, s>>>(a, rows, r, eps);
}

//! Up to this many matrices per batched launch, passed by value (1.3 KB of parameters).
constexpr std::size_t orth_batch_max = 64;
struct orth_batch {
  float* a[orth_batch_max];
  std::uint64_t rows[orth_batch_max];
  std::uint32_t r[orth_batch_max];
};

//! Block b: orth of matrix b of the batch.
__global__ void orth_batch_kernel(orth_batch batch, float eps) {
  const unsigned b = blockIdx.x;
  blocks::powersgd_orthogonalize(batch.a[b], batch.rows[b], batch.r[b], eps,
                                 blocks::block_reducer{});
}

struct matrix_in {
  values_in v;
  std::uint64_t cols;
  __device__ __forceinline__ float operator()(std::uint64_t i, std::uint64_t j) const {
    return v(i * cols + j);
  }
};

//! A warp per row: P[i][c] = sum_j M[i][j] Q[j][c].
__global__ void p_kernel(matrix_in m, std::uint64_t rows, const float* q, std::uint32_t r,
                         float* p) {
  const unsigned lane = threadIdx.x % 32u;
  const std::uint64_t warps = thread_stride() / 32u;
  for (std::uint64_t i = thread_index() / 32u; i < rows; i += warps)
    for (std::uint32_t c = 0; c < r; ++c) {
      const float x = blocks::powersgd_p_entry(m, q, i, m.cols, r, c, blocks::warp_reducer{});
      if (lane == 0) p[i * r + c] = x;
    }
}

//! A thread per entry: Q[j][c] = sum_i M[i][j] P[i][c].
__global__ void q_kernel(matrix_in m, std::uint64_t rows, const float* p, std::uint32_t r,
                         float* q) {
  const std::uint64_t entries = m.cols * r;
  for (std::uint64_t e = thread_index(); e < entries; e += thread_stride())
    q[e] = blocks::canonicalize_nan(
        blocks::powersgd_q_entry(m, p, e / r, rows, r, static_cast<std::uint32_t>(e % r)));
}

//! A warp per entry, for matrices whose cols * r entries would leave most of the GPU idle
//! with a thread each summing every row: the same bits (warp_canonical_sum is the canonical
//! sum's order).
__global__ void q_warp_kernel(matrix_in m, std::uint64_t rows, const float* p, std::uint32_t r,
                              float* q) {
  const unsigned lane = threadIdx.x % 32u;
  const std::uint64_t entries = m.cols * r;
  const std::uint64_t warps = thread_stride() / 32u;
  for (std::uint64_t e = thread_index() / 32u; e < entries; e += warps) {
    const float x = blocks::powersgd_q_entry(
        m, p, e / r, rows, r, static_cast<std::uint32_t>(e % r), blocks::warp_reducer{});
    if (lane == 0) q[e] = blocks::canonicalize_nan(x);
  }
}

//! Below this many entries of Q a warp per entry: a thread each would use fewer than 2^15
//! of the tens of thousands of threads a current GPU runs at once.
constexpr std::uint64_t q_thread_entries = std::uint64_t{1} << 15;

//! Q = M^T P on stream s, by the kernel that fills the GPU for this shape.
void launch_q(matrix_in m, std::uint64_t rows, const float* p, std::uint32_t r, float* q,
              cudaStream_t s) {
  const std::uint64_t entries = m.cols * r;
  if (entries >= q_thread_entries)
    q_kernel<<<grid_for(entries, threads), threads, 0, s>>>(m, rows, p, r, q);
  else
    q_warp_kernel<<<grid_for(entries * 32u, threads), threads, 0, s>>>(m, rows, p, r, q);
}

//! NaNs go on the wire canonical (a GPU's NaN bits are not x86's); P-hat is made canonical
//! once Q, which reads it, is done.
__global__ void canonical_kernel(float* a, std::uint64_t n) {
  for (std::uint64_t k = thread_index(); k < n; k += thread_stride())
    a[k] = blocks::canonicalize_nan(a[k]);
}

__global__ void decode_kernel(const float* p, const float* q, std::uint64_t rows,
                              std::uint64_t cols, std::uint32_t r, decode_target out) {
  if (out.closed()) return;
  const std::uint64_t n = rows * cols;
  for (std::uint64_t k = thread_index(); k < n; k += thread_stride())
    out.emit(k, r == 0 ? p[k] : blocks::powersgd_out_entry(p, q, k / cols, k % cols, r));
}

status decode_into(const detail::decode_call& c, decode_target out) {
  if (auto st = check_frame_alignment(c.payload); !st.ok()) return st;
  const std::uint64_t n = c.hdr.n;
  if (n == 0) return {};
  const std::uint64_t rows = c.hdr.count, cols = n / rows;
  const std::uint32_t r = c.hdr.group;
  const blocks::powersgd_layout l = blocks::powersgd_layout_of(rows, cols, r);
  const auto* payload = reinterpret_cast<const float*>(c.payload);
  decode_kernel<<<grid_for(n, threads), threads, 0, stream_of(c.stream)>>>(
      payload + l.p_offset / 4, payload + l.q_offset / 4, rows, cols, r, out);
  GRADCODEC_CUDA_LAUNCHED("powersgd decode_kernel");
  return {};
}

status encode_values(const detail::encode_call& c, values_in v) {
  const std::uint64_t n = c.in.n;
  const cudaStream_t s = stream_of(c.stream);
  if (n == 0) {
    c.hdr.payload_bytes = 0;
    return finish_frame(c.hdr, c.payload, c.workspace, c.stream);
  }
  const matrix_shape sh = shape_of(c.spec, c.in);
  const blocks::powersgd_layout l = blocks::powersgd_layout_of(sh.rows, sh.cols, sh.r);
  if (l.total > c.capacity)
    return {status_code::output_too_small, "output buffer too small for the payload"};
  scan_kernel<<<grid_for(n, threads), threads, 0, s>>>(v, n, status_of(c.workspace));
  GRADCODEC_CUDA_LAUNCHED("powersgd scan_kernel");
  auto* payload = reinterpret_cast<float*>(c.payload);
  c.hdr.count = sh.rows;
  c.hdr.payload_bytes = l.total;
  if (sh.r == 0) {
    dense_kernel<<<grid_for(n, threads), threads, 0, s>>>(v, n, payload);
    GRADCODEC_CUDA_LAUNCHED("powersgd dense_kernel");
    if (auto st = zero_bytes(c.payload, l.p_bytes, l.total, c.stream); !st.ok()) return st;
    return finish_frame(c.hdr, c.payload, c.workspace, c.stream);
  }
  const std::uint32_t r = sh.r;
  auto* q0 = reinterpret_cast<float*>(after_status(c.workspace).data());
  const auto rng = blocks::counter_rng::make(c.ctx.seed, 0, c.ctx.tensor_id);
  init_q_kernel<<<grid_for(sh.cols * r, threads), threads, 0, s>>>(rng, sh.cols * r, q0);
  GRADCODEC_CUDA_LAUNCHED("init_q_kernel");
  launch_orth(q0, sh.cols, r, c.spec.eps, s);
  GRADCODEC_CUDA_LAUNCHED("orth_kernel");
  float* p = payload + l.p_offset / 4;
  float* q = payload + l.q_offset / 4;
  const matrix_in m{v, sh.cols};
  p_kernel<<<grid_for(sh.rows * 32, threads), threads, 0, s>>>(m, sh.rows, q0, r, p);
  GRADCODEC_CUDA_LAUNCHED("p_kernel");
  launch_orth(p, sh.rows, r, c.spec.eps, s);
  GRADCODEC_CUDA_LAUNCHED("orth_kernel");
  launch_q(m, sh.rows, p, r, q, s);
  GRADCODEC_CUDA_LAUNCHED("q_kernel");
  canonical_kernel<<<grid_for(sh.rows * r, threads), threads, 0, s>>>(p, sh.rows * r);
  GRADCODEC_CUDA_LAUNCHED("powersgd canonical_kernel");
  if (auto st = zero_bytes(c.payload, l.p_bytes, l.q_offset, c.stream); !st.ok()) return st;
  if (auto st = zero_bytes(c.payload, l.q_offset + l.q_bytes, l.total, c.stream); !st.ok())
    return st;
  c.hdr.group = r;
  c.hdr.param = c.spec.eps;
  return finish_frame(c.hdr, c.payload, c.workspace, c.stream);
}

// ---- The phase API (include/gradcodec/powersgd.hpp; src/powersgd.cpp checks arguments) --
// The same operations as the host kernels (reference/powersgd_phases.cpp), one f32 rounding each,
// with x86's NaN rule wherever an x86 add, subtraction or division of the host code meets a NaN
// operand; NaNs the products create differ in their bits from the host's.

//! residual[k] = residual[k] + grad[k].
__global__ void sum_kernel(values_in g, std::uint64_t n, float* e) {
  for (std::uint64_t k = thread_index(); k < n; k += thread_stride())
    e[k] = blocks::fadd_nan_first(e[k], g(k));
}

//! q[k] = q[k] / w (w >= 1: only a NaN q gives a NaN).
__global__ void divide_kernel(float* q, std::uint64_t n, float w) {
  for (std::uint64_t k = thread_index(); k < n; k += thread_stride())
    q[k] = blocks::is_nan(q[k]) ? blocks::quiet(q[k]) : blocks::fdiv(q[k], w);
}

//! out = P Q^T in out's dtype; residual = M - out (f32, before the dtype rounding) or +0.
__global__ void finish_kernel(const float* p, const float* q, std::uint64_t rows,
                              std::uint64_t cols, std::uint32_t r, bool ef, float* residual,
                              void* out, dtype out_type) {
  const std::uint64_t n = rows * cols;
  for (std::uint64_t k = thread_index(); k < n; k += thread_stride()) {
    const float o = blocks::powersgd_out_entry(p, q, k / cols, k % cols, r);
    residual[k] = ef ? blocks::fsub_nan_first(residual[k], o) : 0.0f;
    store_value(out, out_type, k, o);
  }
}

status phase_orthogonalize(float* a, std::uint64_t rows, std::uint32_t r, float eps, void* stream) {
  if (rows == 0 || r == 0) return {};
  launch_orth(a, rows, r, eps, stream_of(stream));
  GRADCODEC_CUDA_LAUNCHED("powersgd orth_kernel");
  return {};
}

status phase_init_q(std::uint64_t seed, std::uint64_t tensor_id, std::uint64_t cols,
                    std::uint32_t r, float eps, float* q, void* stream) {
  if (cols * r == 0) return {};
  const auto rng = blocks::counter_rng::make(seed, 0, tensor_id);
  init_q_kernel<<<grid_for(cols * r, threads), threads, 0, stream_of(stream)>>>(rng, cols * r, q);
  GRADCODEC_CUDA_LAUNCHED("powersgd init_q_kernel");
  return phase_orthogonalize(q, cols, r, eps, stream);
}

status phase_compute_p(const_tensor_view grad, float* residual, const float* q, float* p,
                       std::uint64_t rows, std::uint64_t cols, std::uint32_t r, void* stream) {
  const cudaStream_t s = stream_of(stream);
  if (grad.n == 0) return {};
  sum_kernel<<<grid_for(grad.n, threads), threads, 0, s>>>({grad.data, grad.type}, grad.n,
                                                           residual);
  GRADCODEC_CUDA_LAUNCHED("powersgd sum_kernel");
  if (r == 0) return {};
  p_kernel<<<grid_for(rows * 32, threads), threads, 0, s>>>(matrix_in{{residual, dtype::f32}, cols},
                                                            rows, q, r, p);
  GRADCODEC_CUDA_LAUNCHED("powersgd p_kernel");
  return {};
}

status phase_orthogonalize_batch(const powersgd_matrix* batch, std::size_t count, float eps,
                                 void* stream) {
  orth_batch b{};
  unsigned filled = 0;
  std::uint64_t most_rows = 0;
  auto launch = [&]() -> status {
    if (filled == 0) return {};
    orth_batch_kernel<<<filled, policy::split_threads(most_rows), 0, stream_of(stream)>>>(b, eps);
    filled = 0;
    most_rows = 0;
    GRADCODEC_CUDA_LAUNCHED("powersgd orth_batch_kernel");
    return {};
  };
  for (std::size_t i = 0; i < count; ++i) {
    if (batch[i].rows == 0 || batch[i].r == 0) continue;
    b.a[filled] = batch[i].a.data();
    b.rows[filled] = batch[i].rows;
    b.r[filled] = batch[i].r;
    most_rows = std::max(most_rows, batch[i].rows);
    if (++filled == orth_batch_max)
      if (auto st = launch(); !st.ok()) return st;
  }
  return launch();
}

status phase_project_q(const float* p, const float* m, std::uint64_t rows, std::uint64_t cols,
                       std::uint32_t r, float* q, void* stream) {
  if (rows * cols == 0 || r == 0) return {};
  launch_q(matrix_in{{m, dtype::f32}, cols}, rows, p, r, q, stream_of(stream));
  GRADCODEC_CUDA_LAUNCHED("powersgd q_kernel");
  return {};
}

status phase_finish(const float* p, float* q, std::uint64_t rows, std::uint64_t cols,
                    std::uint32_t r, int world, bool ef, float* residual, tensor_view out,
                    void* stream) {
  const cudaStream_t s = stream_of(stream);
  if (cols * r > 0) {
    divide_kernel<<<grid_for(cols * r, threads), threads, 0, s>>>(q, cols * r,
                                                                  static_cast<float>(world));
    GRADCODEC_CUDA_LAUNCHED("powersgd divide_kernel");
  }
  if (rows * cols == 0) return {};
  finish_kernel<<<grid_for(rows * cols, threads), threads, 0, s>>>(p, q, rows, cols, r, ef,
                                                                   residual, out.data, out.type);
  GRADCODEC_CUDA_LAUNCHED("powersgd finish_kernel");
  return {};
}

}  // namespace

const detail::device_powersgd_phases powersgd_phases{
    phase_init_q, phase_compute_p,     phase_project_q,
    phase_finish, phase_orthogonalize, phase_orthogonalize_batch};

std::size_t powersgd_workspace(const codec_spec& spec, const_tensor_view shape, operation op) {
  if (is_decode(op)) return 0;  // the decode kernel uses no workspace
  const std::uint64_t rows = shape.rows > 0 ? shape.rows : 1;
  if (shape.n % rows != 0) return status_bytes;  // the front end rejects the shape
  const matrix_shape s = shape_of(spec, shape);
  // Q0, then (error feedback) p = g + e.
  return status_bytes + align64(s.cols * s.r * 4) +
         (op == operation::encode_with_feedback ? shape.n * 4 : 0);
}

status powersgd_encode(const detail::encode_call& c) {
  if (auto st = check_frame_alignment(c.payload); !st.ok()) return st;
  if (auto st = begin_frame(c.workspace, c.stream); !st.ok()) return st;
  return encode_values(c, {c.in.data, c.in.type});
}

status powersgd_decode(const detail::decode_call& c) { return decode_into(c, target_of(c)); }

status powersgd_encode_feedback(const detail::feedback_call& c) {
  const detail::encode_call& e = c.enc;
  if (auto st = check_frame_alignment(e.payload); !st.ok()) return st;
  if (auto st = begin_frame(e.workspace, e.stream); !st.ok()) return st;
  const matrix_shape sh = shape_of(e.spec, e.in);
  auto* p =
      reinterpret_cast<float*>(after_status(e.workspace).data() + align64(sh.cols * sh.r * 4));
  return compose_feedback(
      c, p,
      [&](float* sum) {
        return encode_values(e, {sum, dtype::f32});
      },
      [](const detail::decode_call& d, decode_target t) { return decode_into(d, t); });
}

}  // namespace gradcodec::cuda
