// SPDX-License-Identifier: Apache-2.0
//! @file
//! The harness's row notes and `gradcodec bench --verify` (codec_measure.hpp).
#include "codec_measure.hpp"

#include <vector>

#include "text.hpp"

namespace gradcodec::tool {
namespace {

//! The first byte where two byte ranges differ, as a message ("" when equal).
std::string first_difference(const char* what, std::span<const std::byte> a,
                             std::span<const std::byte> b) {
  if (a.size() != b.size())
    return strprintf("%s: %zu bytes against the reference's %zu", what, a.size(), b.size());
  for (std::size_t i = 0; i < a.size(); ++i)
    if (a[i] != b[i]) return strprintf("%s: byte %zu differs from the reference's", what, i);
  return {};
}

std::span<const std::byte> bytes_of(std::span<const float> v) { return std::as_bytes(v); }

}  // namespace

std::string note_of(const status& s, std::string_view backend) {
  if (s.code() == status_code::backend_unavailable)
    return "not implemented on backend " + std::string(backend);
  return "error: " + std::string(status_code_name(s.code())) + ": " + s.message();
}

std::string verify_against_reference(const codec_spec& spec, const context& ctx,
                                     const_tensor_view in, const_bytes frame,
                                     std::span<const float> decoded, const exec_options& opt) {
  const std::uint64_t n = in.n;
  // Each call with a workspace of the size it asks for.
  std::vector<std::byte> ref_ws, ws;
  const auto with_workspace = [&](exec_options o, operation op,
                                  std::vector<std::byte>& w) -> result<exec_options> {
    auto need = workspace_size(spec, in, op, o);
    if (!need) return need.error();
    w.assign(need.value(), std::byte{0});
    o.workspace = w;
    return o;
  };
  auto ref =
      with_workspace(exec_options{backend::reference}, operation::encode_with_feedback, ref_ws);
  auto mine = with_workspace(opt, operation::encode_with_feedback, ws);
  if (!ref || !mine) return "workspace: " + std::string((ref ? mine : ref).error().message());
  const std::uint64_t bound = encode_bound(spec, n, dtype::f32, in.rows);
  std::vector<std::byte> want(bound);
  auto w = encode(spec, ctx, in, want, ref.value());
  if (!w) return "reference encode: " + std::string(w.error().message());
  want.resize(w.value());
  if (auto d = first_difference("frame", frame, want); !d.empty()) return d;
  std::vector<float> ref_out(n);
  if (status s = decode(frame, {ref_out.data(), n, dtype::f32, in.rows}, ref.value()); !s.ok())
    return "reference decode: " + std::string(s.message());
  if (auto d = first_difference("decoded values", bytes_of(decoded), bytes_of(ref_out)); !d.empty())
    return d;
  // One error-feedback step each, from a zero residual.
  std::vector<float> res(n, 0.0f), ref_res(n, 0.0f);
  std::vector<std::byte> ef(bound), ref_ef(bound);
  auto e =
      encode_with_feedback(spec, ctx, in, {res.data(), n, dtype::f32, in.rows}, ef, mine.value());
  auto r = encode_with_feedback(spec, ctx, in, {ref_res.data(), n, dtype::f32, in.rows}, ref_ef,
                                ref.value());
  if (!e || !r) return "error feedback: " + std::string((e ? r : e).error().message());
  if (auto d = first_difference("error-feedback frame", std::span(ef).first(e.value()),
                                std::span(ref_ef).first(r.value()));
      !d.empty())
    return d;
  return first_difference("residual", bytes_of(res), bytes_of(ref_res));
}

}  // namespace gradcodec::tool
