// SPDX-License-Identifier: Apache-2.0
//! @file
//! Reference stateless PowerSGD (docs/codecs.md "powersgd"): one power-iteration step
//! from the shared-seed Q0, P-hat = orth(M Q0), Q = M^T P-hat, both sent as f32; decode
//! is P-hat Q^T. Matrices that do not compress are sent dense (f32). The stateful,
//! warm-started form with error feedback is the phase API in src/powersgd.cpp.
#include "gradcodec/powersgd.hpp"
#include "common.hpp"

namespace gradcodec::reference {
namespace {

constexpr std::uint64_t align64(std::uint64_t x) { return (x + 63u) & ~std::uint64_t{63}; }

using matrix_shape = powersgd_frame_shape;
inline matrix_shape shape_of(const codec_spec& spec, const_tensor_view v) {
  return powersgd_frame_shape_of(spec, v);
}

}  // namespace

std::size_t powersgd_workspace(const codec_spec& spec, const_tensor_view shape, operation op) {
  if (op == operation::decode || op == operation::decode_accumulate) return 0;
  const std::uint64_t rows = shape.rows > 0 ? shape.rows : 1;
  if (shape.n % rows != 0) return 0;  // the front end rejects the shape
  const matrix_shape s = shape_of(spec, shape);
  if (s.r == 0) return 0;
  // Q0 (cols x r), then P (rows x r).
  return static_cast<std::size_t>(align64(s.cols * s.r * 4) + s.rows * s.r * 4);
}

status powersgd_encode(const detail::encode_call& c) {
  const std::uint64_t n = c.in.n;
  if (n == 0) {
    c.hdr.payload_bytes = 0;
    return {};
  }
  const matrix_shape s = shape_of(c.spec, c.in);
  const blocks::powersgd_layout l = blocks::powersgd_layout_of(s.rows, s.cols, s.r);
  if (l.total > c.capacity) return too_small();
  for (std::uint64_t k = 0; k < n; ++k)
    if (!finite(load(c.in, k))) c.hdr.flags |= flag_nonfinite;

  if (s.r == 0) {  // dense: the values as f32, exactly as read
    for (std::uint64_t k = 0; k < n; ++k) put<float>(c.payload + 4 * k, load(c.in, k));
    std::fill(c.payload + l.p_bytes, c.payload + l.total, std::byte{0});
    c.hdr.count = s.rows;
    c.hdr.group = 0;
    c.hdr.param = 0.0f;
    c.hdr.payload_bytes = l.total;
    return {};
  }

  const std::uint64_t rows = s.rows, cols = s.cols;
  const std::uint32_t r = s.r;
  if (c.workspace.size() < powersgd_workspace(c.spec, c.in, operation::encode))
    return {status_code::internal_error, "powersgd: workspace smaller than reported"};
  auto* q0 = reinterpret_cast<float*>(c.workspace.data());
  auto* p = reinterpret_cast<float*>(c.workspace.data() + align64(cols * r * 4));
  if (auto st = powersgd_init_q(c.spec, c.ctx, rows, cols, {q0, cols * r}); !st.ok()) return st;

  // P = M Q0, orthonormalised.
  for (std::uint64_t i = 0; i < rows; ++i)
    for (std::uint32_t k = 0; k < r; ++k)
      p[i * r + k] = canonical_sum(
          cols, [&](std::uint64_t j) { return load(c.in, i * cols + j) * q0[j * r + k]; });
  if (auto st = powersgd_orthogonalize({p, rows * r}, rows, r, c.spec.eps); !st.ok()) return st;

  std::fill(c.payload, c.payload + l.total, std::byte{0});
  // NaNs go on the wire canonical: their bits from the arithmetic differ between x86 and
  // GPUs (and with operand order), the values do not.
  for (std::uint64_t e = 0; e < rows * r; ++e)
    put<float>(c.payload + l.p_offset + 4 * e, detail::canonical_nan(p[e]));
  // Q = M^T P-hat.
  for (std::uint64_t j = 0; j < cols; ++j) {
    for (std::uint32_t k = 0; k < r; ++k) {
      const float qv = canonical_sum(
          rows, [&](std::uint64_t i) { return load(c.in, i * cols + j) * p[i * r + k]; });
      put<float>(c.payload + l.q_offset + 4 * (j * r + k), detail::canonical_nan(qv));
    }
  }
  c.hdr.count = rows;
  c.hdr.group = r;
  c.hdr.param = c.spec.eps;
  c.hdr.payload_bytes = l.total;
  return {};
}

status powersgd_decode(const detail::decode_call& c) {
  // peek() has checked rows | n, r <= min(64, rows, cols) and the payload size; every
  // f32 bit pattern is a valid value, so nothing in the payload can index out of range.
  const std::uint64_t n = c.hdr.n;
  if (n == 0) return {};
  const std::uint64_t rows = c.hdr.count, cols = n / rows;
  const std::uint32_t r = c.hdr.group;
  const blocks::powersgd_layout l = blocks::powersgd_layout_of(rows, cols, r);
  if (r == 0) {
    for (std::uint64_t k = 0; k < n; ++k) emit(c, k, get<float>(c.payload + 4 * k));
    return {};
  }
  const std::byte* p = c.payload + l.p_offset;
  const std::byte* q = c.payload + l.q_offset;
  for (std::uint64_t i = 0; i < rows; ++i) {
    for (std::uint64_t j = 0; j < cols; ++j) {
      const float o = canonical_sum(r, [&](std::uint64_t k) {
        return get<float>(p + 4 * (i * r + k)) * get<float>(q + 4 * (j * r + k));
      });
      emit(c, i * cols + j, o);
    }
  }
  return {};
}

}  // namespace gradcodec::reference
