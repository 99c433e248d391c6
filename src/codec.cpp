// SPDX-License-Identifier: Apache-2.0
//! @file
//! The front end of the codec API: argument and frame checks, backend choice, workspace
//! carving, and the generic error-feedback composition for backends without a fused one.
#include "gradcodec/codec.hpp"

#include <cmath>
#include <cstring>
#include <initializer_list>
#include <string>
#include <utility>

#include "contract/backend.hpp"
#include "contract/block_scaled.hpp"
#include "gradcodec/blocks/expected_header.hpp"
#include "gradcodec/blocks/float16.hpp"
#include "gradcodec/blocks/fmath.hpp"
#include "gradcodec/blocks/layout.hpp"
#include "gradcodec/powersgd.hpp"
#include "src/codecs/descriptor.hpp"

namespace gradcodec {

namespace detail {

status check_buffer_memory(bool on_device, named_buffers buffers, std::string_view who) {
  const backend_table* g = cuda_backend();
  return check_buffer_memory(g != nullptr ? g->device : nullptr, on_device, buffers, who);
}

status check_buffer_memory(const device_access* device, bool on_device, named_buffers buffers,
                           std::string_view who) {
  if (device == nullptr) return {};  // no device: all memory is host's
  for (const auto& [ptr, what] : buffers) {
    if (ptr == nullptr) continue;
    if (on_device) {
      // Device-only memory answers with its device; anything else must be managed memory.
      if (const int held = device->device_of(ptr); held >= 0) {
        const int current = device->current_device();
        if (current >= 0 && held != current)
          return {status_code::invalid_argument, std::string(who)
                                                     .append(" on cuda: the ")
                                                     .append(what)
                                                     .append(" is on cuda:")
                                                     .append(std::to_string(held))
                                                     .append(" but the current device is cuda:")
                                                     .append(std::to_string(current))
                                                     .append(" (call cudaSetDevice(")
                                                     .append(std::to_string(held))
                                                     .append(") first)")};
        continue;
      }
      if (!device->owns(ptr))
        return {status_code::invalid_argument,
                std::string(who)
                    .append(" on cuda: the ")
                    .append(what)
                    .append(" is not device memory (cudaMalloc or managed)")};
      continue;
    }
    if (device->device_of(ptr) >= 0)
      return {
          status_code::invalid_argument,
          std::string(who)
              .append(" on the host: the ")
              .append(what)
              .append(" is device memory (pass backend::cuda with every buffer on the device)")};
  }
  return {};
}

}  // namespace detail

namespace {

using detail::backend_table;
using detail::codec_ops;

constexpr std::uint64_t max_elements = std::uint64_t{1} << 48;
constexpr std::size_t ws_align = 64;

status invalid(std::string_view why) { return {status_code::invalid_argument, why}; }

const backend_table* table_of(backend b) noexcept {
  switch (b) {
    case backend::reference: return &detail::reference_backend();
    case backend::cpu: return detail::cpu_backend();
    case backend::cuda: return detail::cuda_backend();
    case backend::automatic: break;
  }
  return nullptr;
}

//! The codec chosen for a call, and whether its buffers are device memory.
struct picked_ops {
  const codec_ops* ops;
  bool device;    //!< a device backend: every buffer must be device memory
  backend where;  //!< the backend chosen (never automatic)
};

//! Whether a call on `where` with this buffer goes to the CUDA backend.
const backend_table* device_table(backend where, const void* data) noexcept {
  const backend_table* g = detail::cuda_backend();
  if (where == backend::cuda) return g;
  if (where != backend::automatic || g == nullptr || g->device == nullptr) return nullptr;
  return g->device->owns(data) ? g : nullptr;
}

result<picked_ops> pick(backend where, codec_id id, const void* data) noexcept {
  // Device memory: the CUDA backend. Host memory: the CPU backend when built (and the
  // codec is there), else the reference.
  const backend_table* t = nullptr;
  backend chosen = where;
  if (where == backend::automatic) {
    t = device_table(where, data);
    chosen = backend::cuda;
    if (t == nullptr) {
      t = detail::cpu_backend();
      chosen = backend::cpu;
      if (t == nullptr || t->codecs[static_cast<int>(id) - 1].encode == nullptr) {
        t = &detail::reference_backend();
        chosen = backend::reference;
      }
    }
  } else {
    t = table_of(where);
  }
  if (t == nullptr)
    return status{status_code::backend_unavailable, std::string("backend '")
                                                        .append(backend_name(where))
                                                        .append("' is not available: ")
                                                        .append(backend_unavailable_reason(where))};
  const codec_ops& ops = t->codecs[static_cast<int>(id) - 1];
  if (ops.encode == nullptr || ops.decode == nullptr)
    return status{
        status_code::backend_unavailable,
        std::string(codec_name(id)).append(" is not implemented on backend ").append(t->name)};
  return picked_ops{&ops, t->device != nullptr, chosen};
}

//! What check_view checks that needs no data.
status check_shape(const_tensor_view v, std::string_view what) {
  if (!dtype_valid(static_cast<std::uint8_t>(v.type)))
    return invalid(std::string(what).append(": unknown dtype"));
  if (v.n > max_elements) return invalid(std::string(what).append(": more than 2^48 elements"));
  if (v.rows > 0 && v.n % v.rows != 0)
    return invalid(std::string(what).append(": rows do not divide n"));
  return {};
}

status check_view(const_tensor_view v, std::string_view what) {
  if (auto st = check_shape(v, what); !st.ok()) return st;
  if (v.n > 0 && v.data == nullptr) return invalid(std::string(what).append(": null data"));
  // Elements are loaded whole: a GPU faults on a misaligned load, and C++ requires alignment.
  if (reinterpret_cast<std::uintptr_t>(v.data) % dtype_size(v.type) != 0)
    return invalid(std::string(what).append(": data not aligned to its element size"));
  return {};
}

float load(const_tensor_view v, std::uint64_t i) {
  switch (v.type) {
    case dtype::f32: return static_cast<const float*>(v.data)[i];
    case dtype::f16: return blocks::f16_to_f32(static_cast<const std::uint16_t*>(v.data)[i]);
    case dtype::bf16: return blocks::bf16_to_f32(static_cast<const std::uint16_t*>(v.data)[i]);
  }
  return 0.0f;
}

void store(tensor_view v, std::uint64_t i, float x) {
  switch (v.type) {
    case dtype::f32: static_cast<float*>(v.data)[i] = x; break;
    case dtype::f16: static_cast<std::uint16_t*>(v.data)[i] = blocks::f32_to_f16(x); break;
    case dtype::bf16: static_cast<std::uint16_t*>(v.data)[i] = blocks::f32_to_bf16(x); break;
  }
}

bool any_nonfinite(const_tensor_view v) {
  for (std::uint64_t i = 0; i < v.n; ++i)
    if (!std::isfinite(load(v, i))) return true;
  return false;
}

status check_device_buffers(const picked_ops& p, detail::named_buffers buffers) {
  return detail::check_buffer_memory(p.device, buffers, "codec");
}

//! nonfinite=error scans the input on the host before encoding; device memory cannot be.
status check_nonfinite_policy(const codec_spec& spec, const picked_ops& p, const_tensor_view v,
                              std::string_view what) {
  if (spec.nonfinite != nonfinite_policy::error) return {};
  if (p.device)
    return invalid(
        "nonfinite=error needs a host scan of the input; on the CUDA backend use "
        "nonfinite=propagate and check the frame's nonfinite flag (peek)");
  if (any_nonfinite(v))
    return {status_code::nonfinite_input,
            std::string(what).append(" holds NaN or Inf (nonfinite=error)")};
  return {};
}

//! Carves aligned pieces off a caller workspace.
struct carver {
  std::byte* p;
  std::byte* end;
  explicit carver(mutable_bytes ws) : p(ws.data()), end(ws.data() + ws.size()) {
    const auto mis = reinterpret_cast<std::uintptr_t>(p) % ws_align;
    if (p != nullptr && mis != 0) p += ws_align - mis;
    if (p > end) p = end;
  }
  std::byte* take(std::size_t bytes) {
    bytes = (bytes + ws_align - 1) / ws_align * ws_align;
    std::byte* r = p;
    p += bytes;
    return r;
  }
  mutable_bytes rest() const { return {p, static_cast<std::size_t>(end - p)}; }
};

std::size_t generic_feedback_workspace(const codec_ops& ops, const codec_spec& spec,
                                       const_tensor_view shape) {
  const const_tensor_view p{nullptr, shape.n, dtype::f32, shape.rows};
  const std::size_t inner = std::max(ops.workspace ? ops.workspace(spec, p, operation::encode) : 0,
                                     ops.workspace ? ops.workspace(spec, p, operation::decode) : 0);
  return 2 * ((shape.n * 4 + ws_align - 1) / ws_align * ws_align) + inner + ws_align;
}

std::size_t need_workspace(const codec_ops& ops, const codec_spec& spec, const_tensor_view shape,
                           operation op) {
  if (op == operation::encode_with_feedback && ops.encode_feedback == nullptr)
    return generic_feedback_workspace(ops, spec, shape);
  const std::size_t w = ops.workspace ? ops.workspace(spec, shape, op) : 0;
  return w == 0 ? 0 : w + ws_align;
}

status check_workspace(std::size_t need, const exec_options& opt) {
  if (opt.workspace.size() < need)
    return {status_code::workspace_too_small, std::string("workspace of ")
                                                  .append(std::to_string(opt.workspace.size()))
                                                  .append(" bytes, need ")
                                                  .append(std::to_string(need))};
  return {};
}

//! Whether the byte ranges [a, a + an) and [b, b + bn) share a byte.
bool overlaps(const void* a, std::uint64_t an, const void* b, std::uint64_t bn) {
  if (an == 0 || bn == 0) return false;
  const auto x = reinterpret_cast<std::uintptr_t>(a), y = reinterpret_cast<std::uintptr_t>(b);
  return x < y + bn && y < x + an;
}
std::uint64_t byte_size(const_tensor_view v) { return v.n * dtype_size(v.type); }

//! Buffers a call reads while it writes another must be disjoint: the kernels stream and
//! run on several threads, so an overlap would give results that depend on the schedule.
status check_disjoint(const void* a, std::uint64_t an, std::string_view a_name, const void* b,
                      std::uint64_t bn, std::string_view b_name) {
  if (!overlaps(a, an, b, bn)) return {};
  return invalid(std::string("the ").append(a_name).append(" overlaps the ").append(b_name));
}

//! The checks of an encode that need no buffer: the spec, and the input's shape for it.
status check_encode_shape(const codec_spec& spec, const_tensor_view shape) {
  if (auto st = validate(spec); !st.ok()) return st;
  if (auto st = check_shape(shape, "input"); !st.ok()) return st;
  if (detail::block_scaled_group(spec, shape.n, shape.rows) > detail::max_block_scaled_group)
    return invalid("input: fp8row rows longer than 2^24 elements");
  return {};
}

//! The checks of an encode's input and output buffers.
status check_encode_buffers(const_tensor_view in, mutable_bytes out) {
  if (auto st = check_view(in, "input"); !st.ok()) return st;
  if (out.size() < header_bytes)
    return {status_code::output_too_small, "output smaller than the 48-byte header"};
  if (auto st =
          check_disjoint(out.data(), out.size(), "output buffer", in.data, byte_size(in), "input");
      !st.ok())
    return st;
  return {};
}

frame_header base_header(const codec_spec& spec, const_tensor_view in, dtype wire) {
  frame_header h;
  h.codec = spec.id;
  h.type = wire;
  h.n = in.n;
  if (blocks::traits_of(spec.id).indexed && in.n > 0xFFFFFFFFu) h.flags |= flag_index64;
  return h;
}

//! A device backend has written the header itself (its flags are known only there).
result<std::size_t> finish_encode(frame_header& h, mutable_bytes out, const picked_ops& p) {
  if (h.payload_bytes > out.size() - header_bytes)
    return status{status_code::internal_error, "codec wrote past its capacity"};
  if (!p.device) write_header(h, out.data());
  return static_cast<std::size_t>(header_bytes + h.payload_bytes);
}

}  // namespace

std::string_view backend_name(backend b) noexcept {
  switch (b) {
    case backend::automatic: return "auto";
    case backend::reference: return "reference";
    case backend::cpu: return "cpu";
    case backend::cuda: return "cuda";
  }
  return "?";
}

result<backend> backend_from_name(std::string_view name) {
  for (backend b : {backend::automatic, backend::reference, backend::cpu, backend::cuda})
    if (backend_name(b) == name) return b;
  return status{
      status_code::invalid_argument,
      std::string("unknown backend '").append(name).append("' (auto|reference|cpu|cuda)")};
}

bool backend_available(backend b) noexcept {
  return b == backend::automatic || table_of(b) != nullptr;
}

std::string_view backend_unavailable_reason(backend b) noexcept {
  if (backend_available(b)) return "";
  if (b == backend::cuda) return detail::cuda_unavailable_reason();
  return "not built (this build has no cpu/ backend)";
}

std::uint64_t encode_bound(const codec_spec& spec, std::uint64_t n, dtype type,
                           std::uint64_t rows) noexcept {
  const auto raw = static_cast<int>(spec.id);
  if (raw < 1 || raw > codec_count) return header_bytes;
  return header_bytes + detail::descriptor_of(spec.id).payload_from_spec(spec, n, type, rows);
}

codec_spec spec_of(const frame_header& h) noexcept {
  codec_spec s = make_spec(h.codec);
  const auto raw = static_cast<int>(h.codec);
  if (raw < 1 || raw > codec_count) return s;
  const blocks::codec_traits traits = blocks::traits_of(h.codec);
  if (traits.rounds)
    s.rounding = (h.mode & mode_stochastic) ? rounding_mode::stochastic : rounding_mode::nearest;
  if (traits.bucketed && h.group > 0) s.bucket = h.group;
  if (const auto read = detail::descriptor_of(h.codec).spec_from_header) read(h, s);
  return s;
}

result<std::size_t> workspace_size(const codec_spec& spec, const_tensor_view shape, operation op,
                                   const exec_options& opt) noexcept {
  if (op == operation::encode || op == operation::encode_with_feedback) {
    auto p = prepare_encode(spec, shape, op, opt);
    if (!p) return p.error();
    return p.value().workspace_bytes();
  }
  if (auto st = validate(spec); !st.ok()) return st;
  // backend::automatic: shape.data (if given) tells device memory from host memory.
  auto ops = pick(opt.where, spec.id, shape.data);
  if (!ops) return ops.error();
  return need_workspace(*ops.value().ops, spec, shape, op);
}

namespace detail {

//! The prepared call's parts, for the front end only.
struct prepared_access {
  static prepared_encode make(const codec_spec& spec, operation op, const_tensor_view shape,
                              const picked_ops& picked) {
    prepared_encode p;
    p.spec_ = spec;
    p.op_ = op;
    p.where_ = picked.where;
    p.n_ = shape.n;
    p.rows_ = shape.rows;
    p.type_ = shape.type;
    p.workspace_ = need_workspace(*picked.ops, spec, shape, op);
    p.ops_ = picked.ops;
    p.device_ = picked.device;
    return p;
  }
  static picked_ops picked(const prepared_encode& p) { return {p.ops_, p.device_, p.where_}; }
  //! The input must have the shape the call was prepared for.
  static status check_input(const prepared_encode& p, operation op, const_tensor_view in) {
    if (p.ops_ == nullptr) return invalid("encode: the prepared call was never prepared");
    if (p.op_ != op)
      return invalid(op == operation::encode
                         ? "encode: the call was prepared for encode_with_feedback"
                         : "encode_with_feedback: the call was prepared for encode");
    if (in.n != p.n_ || in.type != p.type_ || in.rows != p.rows_)
      return {status_code::shape_mismatch,
              "input: not the length, dtype and rows the call was prepared for"};
    return {};
  }
};

}  // namespace detail

result<prepared_encode> prepare_encode(const codec_spec& spec, const_tensor_view shape,
                                       operation op, const exec_options& opt) noexcept {
  if (op != operation::encode && op != operation::encode_with_feedback)
    return invalid("prepare_encode: op must be encode or encode_with_feedback");
  if (auto st = check_encode_shape(spec, shape); !st.ok()) return st;
  // backend::automatic: shape.data (if given) tells device memory from host memory.
  auto picked = pick(opt.where, spec.id, shape.data);
  if (!picked) return picked.error();
  return detail::prepared_access::make(spec, op, shape, picked.value());
}

result<std::size_t> encode(const prepared_encode& p, const context& ctx, const_tensor_view in,
                           mutable_bytes out, const exec_options& opt) noexcept {
  using access = detail::prepared_access;
  if (auto st = access::check_input(p, operation::encode, in); !st.ok()) return st;
  if (auto st = check_encode_buffers(in, out); !st.ok()) return st;
  const picked_ops picked = access::picked(p);
  const codec_spec& spec = p.spec();
  if (auto st = check_device_buffers(
          picked,
          {{in.data, "input"}, {out.data(), "output buffer"}, {opt.workspace.data(), "workspace"}});
      !st.ok())
    return st;
  if (auto st = check_nonfinite_policy(spec, picked, in, "input"); !st.ok()) return st;
  if (auto st = check_workspace(p.workspace_bytes(), opt); !st.ok()) return st;
  carver ws(opt.workspace);
  frame_header h = base_header(spec, in, in.type);
  detail::encode_call call{
      spec,      ctx, in,          in.type,   out.data() + header_bytes, out.size() - header_bytes,
      ws.rest(), h,   opt.threads, opt.stream};
  if (auto st = picked.ops->encode(call); !st.ok()) return st;
  return finish_encode(h, out, picked);
}

result<std::size_t> encode(const codec_spec& spec, const context& ctx, const_tensor_view in,
                           mutable_bytes out, const exec_options& opt) noexcept {
  auto p = prepare_encode(spec, in, operation::encode, opt);
  if (!p) return p.error();
  return encode(p.value(), ctx, in, out, opt);
}

namespace {

//! What a decode of a frame with header `h` into `out` will run, after every check of the
//! arguments that needs no frame byte: the output, overlaps, the backend and its memory,
//! the workspace. Nothing has been launched or written yet.
struct decode_plan {
  const codec_ops* ops;
};

result<decode_plan> plan_decode(const frame_header& h, const_bytes frame, tensor_view out,
                                bool accumulate, const exec_options& opt) {
  if (auto st = check_view(out, "output"); !st.ok()) return st;
  if (auto st =
          check_disjoint(out.data, byte_size(out), "output", frame.data(), frame.size(), "frame");
      !st.ok())
    return st;
  if (out.n != h.n)
    return status{status_code::shape_mismatch, std::string("output has ")
                                                   .append(std::to_string(out.n))
                                                   .append(" elements, frame has ")
                                                   .append(std::to_string(h.n))};
  auto picked = pick(opt.where, h.codec, frame.data());
  if (!picked) return picked.error();
  const codec_ops& ops = *picked.value().ops;
  if (auto st = check_device_buffers(picked.value(),
                                     {{out.data, "output"}, {opt.workspace.data(), "workspace"}});
      !st.ok())
    return st;
  const operation op = accumulate ? operation::decode_accumulate : operation::decode;
  if (auto st = check_workspace(need_workspace(ops, spec_of(h), out, op), opt); !st.ok()) return st;
  return decode_plan{&ops};
}

status run_decode(const decode_plan& plan, const frame_header& h, const_bytes frame,
                  tensor_view out, float alpha, bool accumulate, const exec_options& opt,
                  frame_verdict* device_verdict) {
  carver ws(opt.workspace);
  // A frame too short for a header reaches here only under a device verdict (which stops
  // every kernel): point the payload at the frame rather than past it.
  const std::byte* payload =
      frame.size() >= header_bytes ? frame.data() + header_bytes : frame.data();
  const detail::decode_call call{h,         payload,     out,        alpha,          accumulate,
                                 ws.rest(), opt.threads, opt.stream, device_verdict, frame.size()};
  return plan.ops->decode(call);
}

//! Which backend table serves a decode of `frame` (null: a host backend), after checking
//! that the frame (and `also`, when given) live in that backend's memory.
result<const backend_table*> decode_memory(const_bytes frame, const exec_options& opt,
                                           const void* also, const char* also_name) {
  const backend_table* dev = device_table(opt.where, frame.data());
  if (opt.where == backend::cuda && dev == nullptr)
    return status{status_code::backend_unavailable,
                  std::string("backend 'cuda' is not available: ")
                      .append(backend_unavailable_reason(backend::cuda))};
  if (frame.size() > 0 && frame.data() == nullptr) return invalid("frame: null data");
  if (dev != nullptr) {
    for (auto [p, name] :
         {std::pair{static_cast<const void*>(frame.data()), "frame"}, std::pair{also, also_name}})
      if (p != nullptr && !dev->device->owns(p))
        return invalid(std::string("backend cuda: the ")
                           .append(name)
                           .append(" is not device memory (cudaMalloc or managed)"));
    return dev;
  }
  if (auto st =
          detail::check_buffer_memory(false, {{frame.data(), "frame"}, {also, also_name}}, "codec");
      !st.ok())
    return st;
  return dev;
}

status decode_common(const_bytes frame, tensor_view out, float alpha, bool accumulate,
                     const exec_options& opt) noexcept {
  // A frame in device memory: its header is copied to the host and checked there.
  auto mem = decode_memory(frame, opt, nullptr, "");
  if (!mem) return mem.error();
  const backend_table* dev = mem.value();
  auto hdr = dev != nullptr && frame.size() > 0 ? dev->device->read_header(frame, opt.stream)
                                                : peek(frame);
  if (!hdr) return hdr.error();
  const frame_header& h = hdr.value();
  if (frame.size() != h.frame_bytes())
    return {status_code::corrupt_frame, std::string("frame is ")
                                            .append(std::to_string(frame.size()))
                                            .append(" bytes, header says ")
                                            .append(std::to_string(h.frame_bytes()))};
  auto plan = plan_decode(h, frame, out, accumulate, opt);
  if (!plan) return plan.error();
  return run_decode(plan.value(), h, frame, out, alpha, accumulate, opt, nullptr);
}

//! An expected header must be one peek() accepts (so that a frame equal to it is one), and
//! its fixed-count codecs must carry elements.
status check_expected(const frame_header& e) {
  std::byte bytes[header_bytes];
  write_header(e, bytes);
  auto back = peek({bytes, header_bytes});
  if (!back) return invalid(std::string("expected header: ").append(back.error().message()));
  // A selecting codec whose count follows the spec alone (top-k, random-k).
  const blocks::codec_traits t = blocks::traits_of(e.codec);
  const bool counted = t.selects && !t.count_from_data;
  if (counted && e.n > 0 && e.count == 0)
    return invalid("expected header: a topk or randomk frame of n > 0 elements carries some");
  return {};
}

status decode_expected_common(const frame_header& expected, const_bytes frame, tensor_view out,
                              float alpha, bool accumulate, frame_verdict* verdict,
                              const exec_options& opt) noexcept {
  if (auto st = check_expected(expected); !st.ok()) return st;
  if (verdict == nullptr) return invalid("decode_expected: the verdict is null");
  if (reinterpret_cast<std::uintptr_t>(verdict) % alignof(frame_verdict) != 0)
    return invalid("decode_expected: the verdict is not 8-byte aligned");
  auto mem = decode_memory(frame, opt, verdict, "verdict");
  if (!mem) return mem.error();
  const backend_table* dev = mem.value();
  if (auto st =
          check_disjoint(verdict, sizeof *verdict, "verdict", frame.data(), frame.size(), "frame");
      !st.ok())
    return st;
  if (auto st =
          check_disjoint(verdict, sizeof *verdict, "verdict", out.data, byte_size(out), "output");
      !st.ok())
    return st;
  if (auto st = check_disjoint(verdict, sizeof *verdict, "verdict", opt.workspace.data(),
                               opt.workspace.size(), "workspace");
      !st.ok())
    return st;
  auto plan = plan_decode(expected, frame, out, accumulate, opt);
  if (!plan) return plan.error();

  if (dev != nullptr) {  // checked and decoded in stream order, the verdict gating the writes
    if (reinterpret_cast<std::uintptr_t>(frame.data()) % 16 != 0)
      return invalid("backend cuda: frames must start 16-byte aligned");
    if (auto st = dev->device->check_header(expected, frame, verdict, opt.stream); !st.ok())
      return st;
    return run_decode(plan.value(), expected, frame, out, alpha, accumulate, opt, verdict);
  }
  // Host: the same check, then an ordinary decode of the frame's own header; what the
  // decoder finds in the payload after a good header is a sparse index.
  *verdict = blocks::check_expected_header(
      expected, reinterpret_cast<const std::uint8_t*>(frame.data()), frame.size());
  if (verdict->code != 0) return verdict_status(*verdict);
  auto hdr = peek(frame);
  if (!hdr) return hdr.error();  // unreachable: the frame's header equals a valid one
  const const_bytes exact{frame.data(), hdr.value().frame_bytes()};  // threshold, dgc: <= size
  status st = run_decode(plan.value(), hdr.value(), exact, out, alpha, accumulate, opt, nullptr);
  if (st.code() != status_code::corrupt_frame) return st;
  verdict->code = static_cast<std::uint32_t>(verdict_code::bad_indices);
  return verdict_status(*verdict);
}

}  // namespace

status decode(const_bytes frame, tensor_view out, const exec_options& opt) noexcept {
  return decode_common(frame, out, 1.0f, false, opt);
}

status decode_accumulate(const_bytes frame, tensor_view acc, float alpha,
                         const exec_options& opt) noexcept {
  return decode_common(frame, acc, alpha, true, opt);
}

status decode_expected(const frame_header& expected, const_bytes frame, tensor_view out,
                       frame_verdict* verdict, const exec_options& opt) noexcept {
  return decode_expected_common(expected, frame, out, 1.0f, false, verdict, opt);
}

status decode_accumulate_expected(const frame_header& expected, const_bytes frame, tensor_view acc,
                                  float alpha, frame_verdict* verdict,
                                  const exec_options& opt) noexcept {
  return decode_expected_common(expected, frame, acc, alpha, true, verdict, opt);
}

result<std::size_t> encode_with_feedback(const prepared_encode& prepared, const context& ctx,
                                         const_tensor_view grad, tensor_view residual,
                                         mutable_bytes out, const exec_options& opt) noexcept {
  using access = detail::prepared_access;
  if (auto st = access::check_input(prepared, operation::encode_with_feedback, grad); !st.ok())
    return st;
  if (auto st = check_encode_buffers(grad, out); !st.ok()) return st;
  if (auto st = check_view(residual, "residual"); !st.ok()) return st;
  if (auto st = check_disjoint(residual.data, byte_size(residual), "residual", grad.data,
                               byte_size(grad), "gradient");
      !st.ok())
    return st;
  if (auto st = check_disjoint(residual.data, byte_size(residual), "residual", out.data(),
                               out.size(), "output buffer");
      !st.ok())
    return st;
  if (residual.n != grad.n)
    return status{status_code::shape_mismatch, "residual and gradient differ in length"};
  const picked_ops picked = access::picked(prepared);
  const codec_spec& spec = prepared.spec();
  const codec_ops& ops = *picked.ops;
  if (auto st = check_device_buffers(picked, {{grad.data, "gradient"},
                                              {residual.data, "residual"},
                                              {out.data(), "output buffer"},
                                              {opt.workspace.data(), "workspace"}});
      !st.ok())
    return st;
  if (auto st = check_nonfinite_policy(spec, picked, grad, "input"); !st.ok()) return st;
  if (auto st = check_nonfinite_policy(spec, picked, residual, "residual"); !st.ok()) return st;
  if (auto st = check_workspace(prepared.workspace_bytes(), opt); !st.ok()) return st;
  carver ws(opt.workspace);
  frame_header h = base_header(spec, grad, grad.type);
  if (ops.encode_feedback != nullptr) {
    detail::feedback_call call{{spec, ctx, grad, grad.type, out.data() + header_bytes,
                                out.size() - header_bytes, ws.rest(), h, opt.threads, opt.stream},
                               residual};
    if (auto st = ops.encode_feedback(call); !st.ok()) return st;
    return finish_encode(h, out, picked);
  }
  if (picked.device)  // the loops below run on the host
    return status{status_code::internal_error, "device backend without fused error feedback"};
  // Generic composition: p = g + e; encode p; d = decode; e = p - d.
  auto* p = reinterpret_cast<float*>(ws.take(grad.n * 4));
  auto* d = reinterpret_cast<float*>(ws.take(grad.n * 4));
  for (std::uint64_t i = 0; i < grad.n; ++i)
    p[i] = blocks::fadd_nan_first(load(grad, i), load(residual, i));
  const const_tensor_view pv{p, grad.n, dtype::f32, grad.rows};
  detail::encode_call call{
      spec,      ctx, pv,          grad.type, out.data() + header_bytes, out.size() - header_bytes,
      ws.rest(), h,   opt.threads, opt.stream};
  if (auto st = ops.encode(call); !st.ok()) return st;
  auto written = finish_encode(h, out, picked);
  if (!written) return written;
  const tensor_view dv{d, grad.n, dtype::f32, grad.rows};
  detail::decode_call dcall{
      h, out.data() + header_bytes, dv, 1.0f, false, ws.rest(), opt.threads, opt.stream};
  if (auto st = ops.decode(dcall); !st.ok()) return st;
  for (std::uint64_t i = 0; i < grad.n; ++i) store(residual, i, p[i] - d[i]);
  return written;
}

result<std::size_t> encode_with_feedback(const codec_spec& spec, const context& ctx,
                                         const_tensor_view grad, tensor_view residual,
                                         mutable_bytes out, const exec_options& opt) noexcept {
  auto p = prepare_encode(spec, grad, operation::encode_with_feedback, opt);
  if (!p) return p.error();
  return encode_with_feedback(p.value(), ctx, grad, residual, out, opt);
}

}  // namespace gradcodec
