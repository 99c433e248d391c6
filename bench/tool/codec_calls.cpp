// SPDX-License-Identifier: Apache-2.0
//! @file
//! The library calls the tool makes.
#include "codec_calls.hpp"

#include "error.hpp"

namespace gradcodec::tool {

exec_options exec_from_args(const parsed_args& args) {
  exec_options opt;
  auto b = backend_from_name(args.get("backend").value_or("auto"));
  if (!b) usage_fail(std::string("--backend: ") + b.error().message());
  if (!backend_available(b.value()))
    fail("backend '" + std::string(backend_name(b.value())) +
         "' is not available: " + std::string(backend_unavailable_reason(b.value())));
  opt.where = b.value();
  return opt;
}

codec_spec spec_from_text(const std::string& what, const std::string& text) {
  auto s = parse_spec(text);
  if (!s) usage_fail(what + ": bad codec spec '" + text + "': " + s.error().message());
  return s.value();
}

std::vector<std::byte> allocate_workspace(const codec_spec& spec, const_tensor_view shape,
                                          operation op, const exec_options& opt) {
  shape.data = nullptr;
  auto size = workspace_size(spec, shape, op, opt);
  if (!size) fail(describe(to_string(spec) + ": workspace query failed", size.error()));
  return std::vector<std::byte>(size.value());
}

std::vector<std::byte> encode_tensor(const codec_spec& spec, const context& ctx,
                                     const_tensor_view in, const exec_options& opt) {
  std::vector<std::byte> frame(encode_bound(spec, in.n, in.type, in.rows));
  auto ws = allocate_workspace(spec, in, operation::encode, opt);
  exec_options o = opt;
  o.workspace = ws;
  auto written = encode(spec, ctx, in, frame, o);
  if (!written) fail(describe("encode with " + to_string(spec) + " failed", written.error()));
  frame.resize(written.value());
  return frame;
}

std::uint64_t decode_rows(const frame_header& h, std::uint64_t array_rows) noexcept {
  // PowerSGD's matrix shape travels in the frame (count = rows); the workspace needs it.
  return h.codec == codec_id::powersgd ? h.count : array_rows;
}

void decode_frame(const_bytes frame, const frame_header& h, tensor_view out,
                  const exec_options& opt) {
  const codec_spec spec = spec_of(h);
  out.rows = decode_rows(h, out.rows);
  auto ws = allocate_workspace(spec, out, operation::decode, opt);
  exec_options o = opt;
  o.workspace = ws;
  if (auto st = decode(frame, out, o); !st.ok())
    fail(describe("decode of a " + std::string(codec_name(h.codec)) + " frame failed", st));
}

}  // namespace gradcodec::tool
