// SPDX-License-Identifier: Apache-2.0
//! @file
//! The PowerSGD phase API (docs/codecs.md "powersgd"): argument checks, then the kernels of
//! the backend chosen as for codec calls (exec_options::where): the CUDA phases, or a host
//! backend's contract/powersgd_kernels.hpp (the CPU backend's, or the reference's scalar
//! oracle, reference/powersgd_phases.cpp, which the CPU and CUDA versions reproduce bit
//! for bit). Also the state checkpoint format (docs/format.md "PowerSGD state").
#include "gradcodec/powersgd.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <utility>
#include <vector>

#include "contract/backend.hpp"
#include "contract/powersgd_kernels.hpp"
#include "gradcodec/blocks/fmath.hpp"
#include "gradcodec/blocks/layout.hpp"
#include "gradcodec/blocks/philox.hpp"
#include "gradcodec/frame.hpp"

namespace gradcodec {
namespace {

constexpr std::uint64_t max_elements = std::uint64_t{1} << 48;
constexpr int max_world = 1 << 24;  // W is exact as an f32

//! "what has got floats, need want" without allocating.
status size_error(const char* what, std::uint64_t got, std::uint64_t want) noexcept {
  char msg[status::max_message + 1];
  std::snprintf(msg, sizeof msg, "powersgd: %s has %llu floats, need %llu", what,
                static_cast<unsigned long long>(got), static_cast<unsigned long long>(want));
  return {status_code::shape_mismatch, msg};
}

status invalid(std::string_view why) noexcept { return {status_code::invalid_argument, why}; }

status check_spec(const codec_spec& spec) noexcept {
  if (spec.id != codec_id::powersgd) return invalid("powersgd: the spec is not a powersgd spec");
  return validate(spec);
}

//! The matrix shape of a view: rows = view.rows (1 when 0), cols = n / rows.
status shape_of(const_tensor_view v, const char* what, std::uint64_t& rows, std::uint64_t& cols) {
  if (!dtype_valid(static_cast<std::uint8_t>(v.type))) return invalid("powersgd: unknown dtype");
  if (v.n > max_elements) return invalid("powersgd: more than 2^48 elements");
  if (v.n > 0 && v.data == nullptr) return invalid("powersgd: null tensor data");
  rows = v.rows > 0 ? v.rows : 1;
  if (v.n % rows != 0) {
    char msg[status::max_message + 1];
    std::snprintf(msg, sizeof msg, "powersgd: %s rows (%llu) do not divide n (%llu)", what,
                  static_cast<unsigned long long>(rows), static_cast<unsigned long long>(v.n));
    return invalid(msg);
  }
  cols = v.n / rows;
  return {};
}

// --- state format ------------------------------------------------------------------------

constexpr std::uint32_t state_magic = 0x53504347u;  // bytes "GCPS"
constexpr std::uint8_t state_version = 1;
constexpr std::uint64_t state_header = 48;

struct state_layout {
  std::uint64_t q_offset, q_bytes, res_offset, res_bytes, crc_offset, total;
};

bool state_shape_ok(std::uint64_t rows, std::uint64_t cols, std::uint32_t rank) {
  if (rows == 0 || cols == 0 || rows > max_elements / cols) return false;
  return rank >= 1 && rank <= 64 && rank <= rows && rank <= cols;
}

state_layout state_layout_of(std::uint64_t rows, std::uint64_t cols, std::uint32_t rank) {
  state_layout l{};
  l.q_offset = state_header;
  l.q_bytes = cols * rank * 4;
  l.res_offset = l.q_offset + blocks::align16(l.q_bytes);
  l.res_bytes = rows * cols * 4;
  l.crc_offset = l.res_offset + blocks::align16(l.res_bytes);
  l.total = l.crc_offset + 4;
  return l;
}

template <class T>
void put_at(std::byte* p, std::uint64_t off, T v) {
  std::memcpy(p + off, &v, sizeof v);
}
template <class T>
T get_at(const std::byte* p, std::uint64_t off) {
  T v;
  std::memcpy(&v, p + off, sizeof v);
  return v;
}

bool all_zero(const std::byte* p, std::uint64_t from, std::uint64_t to) {
  for (std::uint64_t i = from; i < to; ++i)
    if (p[i] != std::byte{0}) return false;
  return true;
}

status corrupt_state(std::string_view why) { return {status_code::corrupt_frame, why}; }

}  // namespace

namespace detail {

const powersgd_kernels* powersgd_host_kernels(backend where) noexcept {
  // The host backend a codec call would take: reference or cpu as asked, automatic the CPU
  // backend when built, else the reference.
  const backend_table* h = where == backend::reference ? &reference_backend() : cpu_backend();
  if (h == nullptr && where == backend::cpu) return nullptr;
  if (h == nullptr || h->powersgd == nullptr) h = &reference_backend();
  return h->powersgd;
}

}  // namespace detail

namespace {

//! Where a phase runs: the device phases when opt asks for CUDA (or automatic finds
//! `first` in device memory), else the host backend's kernels; an error when CUDA is asked for
//! and missing, an array is not device memory, or nonfinite=error needs a host scan.
struct phase_target {
  const detail::device_powersgd_phases* device = nullptr;
  status error{};
  const detail::powersgd_kernels* host = nullptr;  //!< when device is null and error is ok
};

phase_target target_of(const codec_spec* spec, const exec_options& opt, const void* first,
                       detail::named_buffers arrays) {
  const detail::backend_table* g = detail::cuda_backend();
  const bool want =
      opt.where == backend::cuda || (opt.where == backend::automatic && g != nullptr &&
                                     g->device != nullptr && g->device->owns(first));
  if (!want) {
    const detail::powersgd_kernels* h = detail::powersgd_host_kernels(opt.where);
    if (h == nullptr)
      return {nullptr, {status_code::backend_unavailable, "backend 'cpu' is not available"}};
    return {nullptr, detail::check_buffer_memory(false, arrays, "powersgd"), h};
  }
  if (g == nullptr || g->powersgd_phases == nullptr)
    return {nullptr, {status_code::backend_unavailable, "backend 'cuda' is not available"}};
  if (auto st = detail::check_buffer_memory(true, arrays, "powersgd"); !st.ok())
    return {nullptr, st};
  if (spec != nullptr && spec->nonfinite == nonfinite_policy::error)
    return {nullptr, invalid("powersgd on cuda: nonfinite=error needs a host scan of the input; "
                             "use nonfinite=propagate")};
  return {g->powersgd_phases, {}};
}

}  // namespace

powersgd_frame_shape powersgd_frame_shape_of(const codec_spec& spec, const_tensor_view v) noexcept {
  powersgd_frame_shape s{};
  s.rows = v.rows > 0 ? v.rows : 1;
  s.cols = v.n / s.rows;
  s.r = powersgd_compresses(spec, s.rows, s.cols) ? powersgd_rank(spec, s.rows, s.cols) : 0;
  return s;
}

std::uint64_t powersgd_square_rows(std::uint64_t n) noexcept {
  auto r = static_cast<std::uint64_t>(std::sqrt(static_cast<double>(n)));
  while (r > 1 && (r * r > n || n % r != 0)) --r;
  return std::max<std::uint64_t>(r, 1);
}

bool powersgd_compresses(const codec_spec& spec, std::uint64_t rows, std::uint64_t cols) noexcept {
  if (rows <= 1 || cols <= 1) return false;
  const double r = powersgd_rank(spec, rows, cols);
  return static_cast<double>(rows) * static_cast<double>(cols) >
         static_cast<double>(spec.min_rate) * static_cast<double>(rows + cols) * r;
}

std::uint32_t powersgd_rank(const codec_spec& spec, std::uint64_t rows,
                            std::uint64_t cols) noexcept {
  std::uint64_t r = spec.rank;
  if (rows < r) r = rows;
  if (cols < r) r = cols;
  return static_cast<std::uint32_t>(r);
}

status powersgd_orthogonalize(std::span<float> a, std::uint64_t rows, std::uint32_t r, float eps,
                              const exec_options& opt) noexcept {
  if (rows > max_elements || r > 64)
    return invalid("powersgd: orthogonalize takes rows <= 2^48, r <= 64");
  if (a.size() != rows * r) return size_error("the matrix to orthogonalize", a.size(), rows * r);
  const phase_target t = target_of(nullptr, opt, a.data(), {{a.data(), "a"}});
  if (!t.error.ok()) return t.error;
  if (t.device != nullptr) return t.device->orthogonalize(a.data(), rows, r, eps, opt.stream);
  t.host->orthogonalize(a.data(), rows, r, eps);
  return {};
}

status powersgd_orthogonalize(std::span<float> a, std::uint64_t rows, std::uint32_t r,
                              float eps) noexcept {
  return powersgd_orthogonalize(a, rows, r, eps, exec_options{});
}

status powersgd_init_q(const codec_spec& spec, const context& ctx, std::uint64_t rows,
                       std::uint64_t cols, std::span<float> q) noexcept {
  return powersgd_init_q(spec, ctx, rows, cols, q, exec_options{});
}

status powersgd_init_q(const codec_spec& spec, const context& ctx, std::uint64_t rows,
                       std::uint64_t cols, std::span<float> q, const exec_options& opt) noexcept {
  if (auto st = check_spec(spec); !st.ok()) return st;
  if (cols > max_elements) return invalid("powersgd: more than 2^48 columns");
  const std::uint32_t r = powersgd_rank(spec, rows, cols);
  if (q.size() != cols * r) return size_error("q", q.size(), cols * r);
  const phase_target t = target_of(nullptr, opt, q.data(), {{q.data(), "q"}});
  if (!t.error.ok()) return t.error;
  if (t.device != nullptr)
    return t.device->init_q(ctx.seed, ctx.tensor_id, cols, r, spec.eps, q.data(), opt.stream);
  const auto rng = blocks::counter_rng::make(ctx.seed, 0, ctx.tensor_id);
  for (std::uint64_t e = 0; e < cols * r; ++e) {
    const blocks::philox_block b = rng.block(blocks::rng_stream::init, e);
    const float u0 = blocks::uniform01(b.v[0]), u1 = blocks::uniform01(b.v[1]);
    const float u2 = blocks::uniform01(b.v[2]), u3 = blocks::uniform01(b.v[3]);
    // Irwin-Hall: the sum of four uniforms has mean 2 and variance 1/3.
    const float s = (u0 + u1) + (u2 + u3);
    q[e] = (s - 2.0f) * 1.7320508f;
  }
  // The host kernels directly: the arrays were placed above (a managed q must not be
  // sent to the GPU by the automatic choice of the public call).
  t.host->orthogonalize(q.data(), cols, r, spec.eps);
  return {};
}

status powersgd_compute_p(const codec_spec& spec, const_tensor_view grad, std::span<float> residual,
                          std::span<const float> q, std::span<float> p) noexcept {
  return powersgd_compute_p(spec, grad, residual, q, p, exec_options{});
}

status powersgd_compute_p(const codec_spec& spec, const_tensor_view grad, std::span<float> residual,
                          std::span<const float> q, std::span<float> p,
                          const exec_options& opt) noexcept {
  if (auto st = check_spec(spec); !st.ok()) return st;
  std::uint64_t rows = 0, cols = 0;
  if (auto st = shape_of(grad, "grad", rows, cols); !st.ok()) return st;
  const std::uint32_t r = powersgd_rank(spec, rows, cols);
  if (residual.size() != grad.n) return size_error("residual", residual.size(), grad.n);
  if (q.size() != cols * r) return size_error("q", q.size(), cols * r);
  if (p.size() != rows * r) return size_error("p", p.size(), rows * r);
  const phase_target t = target_of(
      &spec, opt, grad.data,
      {{grad.data, "grad"}, {residual.data(), "residual"}, {q.data(), "q"}, {p.data(), "p"}});
  if (!t.error.ok()) return t.error;
  if (t.device != nullptr)
    return t.device->compute_p(grad, residual.data(), q.data(), p.data(), rows, cols, r,
                               opt.stream);
  const detail::powersgd_kernels& k = *t.host;
  if (spec.nonfinite == nonfinite_policy::error && k.nonfinite_sum(grad, residual.data()))
    return {status_code::nonfinite_input,
            "powersgd: grad + residual holds NaN or Inf (nonfinite=error)"};
  k.compute_p(grad, residual.data(), q.data(), p.data(), rows, cols, r);
  return {};
}

status powersgd_compute_q(const codec_spec& spec, std::span<float> p,
                          std::span<const float> residual, std::uint64_t rows, std::uint64_t cols,
                          std::span<float> q) noexcept {
  return powersgd_compute_q(spec, p, residual, rows, cols, q, exec_options{});
}

namespace {

//! compute_q and project_q: checks the arguments and finds where they run.
phase_target q_target(const codec_spec& spec, std::span<const float> p,
                      std::span<const float> residual, std::uint64_t rows, std::uint64_t cols,
                      std::span<float> q, const exec_options& opt, std::uint32_t& r) {
  if (auto st = check_spec(spec); !st.ok()) return {nullptr, st};
  if (cols != 0 && rows > max_elements / cols)
    return {nullptr, invalid("powersgd: rows*cols above 2^48")};
  r = powersgd_rank(spec, rows, cols);
  if (residual.size() != rows * cols)
    return {nullptr, size_error("residual", residual.size(), rows * cols)};
  if (p.size() != rows * r) return {nullptr, size_error("p", p.size(), rows * r)};
  if (q.size() != cols * r) return {nullptr, size_error("q", q.size(), cols * r)};
  return target_of(nullptr, opt, p.data(),
                   {{p.data(), "p"}, {residual.data(), "residual"}, {q.data(), "q"}});
}

//! q = M^T p on the chosen side, p already orthonormal.
status project(const phase_target& t, const float* p, const float* m, std::uint64_t rows,
               std::uint64_t cols, std::uint32_t r, float* q, const exec_options& opt) {
  if (t.device != nullptr) return t.device->project_q(p, m, rows, cols, r, q, opt.stream);
  t.host->compute_q(m, rows, cols, p, r, q);
  return {};
}

}  // namespace

status powersgd_compute_q(const codec_spec& spec, std::span<float> p,
                          std::span<const float> residual, std::uint64_t rows, std::uint64_t cols,
                          std::span<float> q, const exec_options& opt) noexcept {
  std::uint32_t r = 0;
  const phase_target t = q_target(spec, p, residual, rows, cols, q, opt, r);
  if (!t.error.ok()) return t.error;
  if (t.device != nullptr) {
    if (auto st = t.device->orthogonalize(p.data(), rows, r, spec.eps, opt.stream); !st.ok())
      return st;
  } else {
    t.host->orthogonalize(p.data(), rows, r, spec.eps);
  }
  return project(t, p.data(), residual.data(), rows, cols, r, q.data(), opt);
}

status powersgd_project_q(const codec_spec& spec, std::span<const float> p,
                          std::span<const float> residual, std::uint64_t rows, std::uint64_t cols,
                          std::span<float> q, const exec_options& opt) noexcept {
  std::uint32_t r = 0;
  const phase_target t = q_target(spec, p, residual, rows, cols, q, opt, r);
  if (!t.error.ok()) return t.error;
  return project(t, p.data(), residual.data(), rows, cols, r, q.data(), opt);
}

status powersgd_orthogonalize_batch(std::span<const powersgd_matrix> batch, float eps,
                                    const exec_options& opt) noexcept {
  if (batch.empty()) return {};
  for (const powersgd_matrix& m : batch) {
    if (m.rows > max_elements || m.r > 64)
      return invalid("powersgd: orthogonalize takes rows <= 2^48, r <= 64");
    if (m.a.size() != m.rows * m.r)
      return size_error("a matrix to orthogonalize", m.a.size(), m.rows * m.r);
  }
  // Overlapping matrices would race on the GPU and depend on the order on the host.
  std::vector<std::pair<const float*, std::size_t>> spans;
  for (const powersgd_matrix& m : batch)
    if (!m.a.empty()) spans.emplace_back(m.a.data(), m.a.size());
  std::sort(spans.begin(), spans.end());
  for (std::size_t i = 1; i < spans.size(); ++i)
    if (spans[i - 1].first + spans[i - 1].second > spans[i].first)
      return invalid("powersgd: the matrices of a batch overlap");
  if (spans.empty()) return {};  // nothing to orthogonalize
  // The first non-empty matrix decides where an automatic batch runs (as `first` does for
  // one matrix); every other must then live there too.
  const float* first = spans.front().first;
  for (const powersgd_matrix& m : batch)
    if (!m.a.empty()) {
      first = m.a.data();
      break;
    }
  const phase_target t = target_of(nullptr, opt, first, {{first, "a"}});
  if (!t.error.ok()) return t.error;
  for (const powersgd_matrix& m : batch)
    if (m.a.empty()) {
      continue;  // its pointer may be one past an allocation: nothing to check or touch
    } else if (auto st = detail::check_buffer_memory(t.device != nullptr, {{m.a.data(), "a"}},
                                                     "powersgd");
               !st.ok())
      return st;
  if (t.device != nullptr)
    return t.device->orthogonalize_batch(batch.data(), batch.size(), eps, opt.stream);
  for (const powersgd_matrix& m : batch) t.host->orthogonalize(m.a.data(), m.rows, m.r, eps);
  return {};
}

status powersgd_finish(const codec_spec& spec, std::span<const float> p, std::span<float> q,
                       int world_size, bool error_feedback, std::span<float> residual,
                       tensor_view out) noexcept {
  return powersgd_finish(spec, p, q, world_size, error_feedback, residual, out, exec_options{});
}

status powersgd_finish(const codec_spec& spec, std::span<const float> p, std::span<float> q,
                       int world_size, bool error_feedback, std::span<float> residual,
                       tensor_view out, const exec_options& opt) noexcept {
  if (auto st = check_spec(spec); !st.ok()) return st;
  if (world_size < 1 || world_size > max_world)
    return invalid("powersgd: world size must be in 1..2^24");
  std::uint64_t rows = 0, cols = 0;
  if (auto st = shape_of(out, "out", rows, cols); !st.ok()) return st;
  const std::uint32_t r = powersgd_rank(spec, rows, cols);
  if (p.size() != rows * r) return size_error("p", p.size(), rows * r);
  if (q.size() != cols * r) return size_error("q", q.size(), cols * r);
  if (residual.size() != out.n) return size_error("residual", residual.size(), out.n);
  const phase_target t = target_of(
      nullptr, opt, p.data(),
      {{p.data(), "p"}, {q.data(), "q"}, {residual.data(), "residual"}, {out.data, "out"}});
  if (!t.error.ok()) return t.error;
  if (t.device != nullptr)
    return t.device->finish(p.data(), q.data(), rows, cols, r, world_size, error_feedback,
                            residual.data(), out, opt.stream);
  t.host->finish(p.data(), q.data(), rows, cols, r, world_size, error_feedback, residual.data(),
                 out);
  return {};
}

// --- checkpointing --------------------------------------------------------------------

std::uint64_t powersgd_state_bytes(std::uint64_t rows, std::uint64_t cols,
                                   std::uint32_t rank) noexcept {
  return state_shape_ok(rows, cols, rank) ? state_layout_of(rows, cols, rank).total : 0;
}

result<std::size_t> powersgd_save_state(const powersgd_state_info& info, std::span<const float> q,
                                        std::span<const float> residual,
                                        mutable_bytes out) noexcept {
  if (!state_shape_ok(info.rows, info.cols, info.rank))
    return invalid(
        "powersgd state: rows and cols must be >= 1 with rows*cols <= 2^48, rank in 1..min(64, "
        "rows, cols)");
  const state_layout l = state_layout_of(info.rows, info.cols, info.rank);
  if (q.size() != info.cols * info.rank) return size_error("q", q.size(), info.cols * info.rank);
  if (residual.size() != info.rows * info.cols)
    return size_error("residual", residual.size(), info.rows * info.cols);
  if (out.size() < l.total)
    return status{status_code::output_too_small, "powersgd state: output too small"};
  std::byte* b = out.data();
  std::memset(b, 0, l.total);
  put_at<std::uint32_t>(b, 0, state_magic);
  put_at<std::uint8_t>(b, 4, state_version);
  put_at<std::uint64_t>(b, 8, info.rows);
  put_at<std::uint64_t>(b, 16, info.cols);
  put_at<std::uint32_t>(b, 24, info.rank);
  put_at<std::uint64_t>(b, 32, info.step);
  if (l.q_bytes > 0) std::memcpy(b + l.q_offset, q.data(), l.q_bytes);
  if (l.res_bytes > 0) std::memcpy(b + l.res_offset, residual.data(), l.res_bytes);
  put_at<std::uint32_t>(b, l.crc_offset, crc32c(b, l.crc_offset));
  return static_cast<std::size_t>(l.total);
}

result<powersgd_state_info> powersgd_peek_state(const_bytes state) noexcept {
  const std::byte* b = state.data();
  if (state.size() < state_header)
    return corrupt_state("powersgd state: shorter than its 48-byte header");
  if (get_at<std::uint32_t>(b, 0) != state_magic) return corrupt_state("powersgd state: bad magic");
  if (get_at<std::uint8_t>(b, 4) != state_version)
    return status{status_code::unsupported_version, "powersgd state: unsupported version"};
  if (!all_zero(b, 5, 8) || !all_zero(b, 28, 32) || !all_zero(b, 40, 48))
    return corrupt_state("powersgd state: reserved header bytes are not zero");
  powersgd_state_info info;
  info.rows = get_at<std::uint64_t>(b, 8);
  info.cols = get_at<std::uint64_t>(b, 16);
  info.rank = get_at<std::uint32_t>(b, 24);
  info.step = get_at<std::uint64_t>(b, 32);
  if (!state_shape_ok(info.rows, info.cols, info.rank))
    return corrupt_state("powersgd state: shape or rank out of range");
  const state_layout l = state_layout_of(info.rows, info.cols, info.rank);
  if (state.size() != l.total)
    return corrupt_state("powersgd state: size does not match its shape (truncated?)");
  if (get_at<std::uint32_t>(b, l.crc_offset) != crc32c(b, l.crc_offset))
    return corrupt_state("powersgd state: checksum mismatch");
  if (!all_zero(b, l.q_offset + l.q_bytes, l.res_offset) ||
      !all_zero(b, l.res_offset + l.res_bytes, l.crc_offset))
    return corrupt_state("powersgd state: padding bytes are not zero");
  return info;
}

result<powersgd_state_info> powersgd_load_state(const_bytes state, std::uint64_t rows,
                                                std::uint64_t cols, std::uint32_t rank,
                                                std::span<float> q,
                                                std::span<float> residual) noexcept {
  auto peeked = powersgd_peek_state(state);
  if (!peeked) return peeked.error();
  const powersgd_state_info& info = peeked.value();
  if (info.rows != rows || info.cols != cols || info.rank != rank) {
    char msg[status::max_message + 1];
    std::snprintf(
        msg, sizeof msg, "powersgd state: saved %llux%llu rank %u, expected %llux%llu rank %u",
        static_cast<unsigned long long>(info.rows), static_cast<unsigned long long>(info.cols),
        info.rank, static_cast<unsigned long long>(rows), static_cast<unsigned long long>(cols),
        rank);
    return status{status_code::shape_mismatch, msg};
  }
  const state_layout l = state_layout_of(info.rows, info.cols, info.rank);
  if (q.size() != cols * rank) return size_error("q", q.size(), cols * rank);
  if (residual.size() != rows * cols) return size_error("residual", residual.size(), rows * cols);
  std::memcpy(q.data(), state.data() + l.q_offset, l.q_bytes);
  std::memcpy(residual.data(), state.data() + l.res_offset, l.res_bytes);
  return info;
}

}  // namespace gradcodec
