// SPDX-License-Identifier: Apache-2.0
//! @file
//! The run of one call: failures, error words, and the encode of one frame.
#include "comm/src/run.hpp"

#include <algorithm>
#include <string>

#include "comm/src/contexts.hpp"
#include "comm/src/wire_blocks.hpp"
#include "comm/src/workspace.hpp"

namespace gradcodec::comm::detail {

void run::fail(const status& s) {
  if (local.ok()) local = s;
  note(error_word(reported_rank, s.ok() ? status_code::internal_error : s.code()));
}

void run::note(std::uint64_t word) noexcept {
  if (word == 0) return;
  const auto rank_of = [](std::uint64_t w) { return (w & ~(std::uint64_t{1} << 63)) >> 8; };
  if (poison == 0 || rank_of(word) < rank_of(poison)) poison = word;
}

segment run::seg(std::uint64_t i) const noexcept {
  if (!pieces.empty()) return {pieces[i].offset, pieces[i].n, pieces[i].rows};
  const std::uint64_t off = i * seg_len;
  return {off, std::min(seg_len, in.n - off), 0};
}

status run::outcome() const {
  if (!local.ok()) return local;
  return failure_status(poison);
}

std::uint64_t error_word(int rank, status_code code) noexcept {
  return (std::uint64_t{1} << 63) | (static_cast<std::uint64_t>(rank) << 8) |
         static_cast<std::uint64_t>(code);
}

status failure_status(std::uint64_t word) {
  if (word == 0) return {};
  const std::uint64_t rank = (word & ~(std::uint64_t{1} << 63)) >> 8;
  const auto code = static_cast<status_code>(word & 0xFF);
  return {status_code::comm_error, std::string("rank ")
                                       .append(std::to_string(rank))
                                       .append(" failed (")
                                       .append(status_code_name(code))
                                       .append("); no rank has a result")};
}

//! `bytes` of the workspace's scratch (none for 0).
static std::span<std::byte> scratch_of(run& r, std::size_t bytes) {
  if (bytes == 0) return {};
  return {r.ws.scratch.reserve(bytes, r.mem), bytes};
}

std::span<std::byte> codec_scratch(run& r, const codec_spec& spec, const_tensor_view shape,
                                   operation op) {
  auto need = workspace_size(spec, shape, op, r.exec({}));
  if (!need) {
    r.fail(need.error());
    return {};
  }
  return scratch_of(r, need.value());
}

std::uint64_t encode_frame(run& r, const context& fctx, const_tensor_view in, tensor_view residual,
                           mutable_bytes dst) {
  if (!frame_aligned(r, dst.data())) return 0;
  const bool feedback = residual.data != nullptr;
  // Prepared once: the spec is checked and the backend chosen once per frame.
  const auto prepared = prepare_encode(
      r.cfg.spec, in, feedback ? operation::encode_with_feedback : operation::encode, r.exec({}));
  if (!prepared) {
    r.fail(prepared.error());
    return 0;
  }
  const auto ws = scratch_of(r, prepared.value().workspace_bytes());
  const result<std::size_t> written =
      feedback ? encode_with_feedback(prepared.value(), fctx, in, residual, dst, r.exec(ws))
               : encode(prepared.value(), fctx, in, dst, r.exec(ws));
  if (!written) {
    r.fail(written.error());
    return 0;
  }
  return written.value();
}

bool frame_aligned(run& r, const void* frame) {
  if (reinterpret_cast<std::uintptr_t>(frame) % frame_align == 0) return true;
  r.fail({status_code::internal_error, "allreduce: a frame is not 16-byte aligned"});
  return false;
}

context frame_context(const run& r, std::uint64_t role, std::uint64_t segment,
                      std::uint64_t chunk) {
  // Random-k must pick the same indices on every rank; other codecs decorrelate ranks.
  const bool shared = r.cfg.spec.id == codec_id::randomk || role == role_server;
  return derive(r.ctx, role, segment, chunk,
                shared ? shared_rank : static_cast<std::uint64_t>(r.me));
}

}  // namespace gradcodec::comm::detail
