// SPDX-License-Identifier: Apache-2.0
//! @file
//! Block headers on the wire, and the decode of received frames.
#include "comm/src/wire_blocks.hpp"

#include <algorithm>
#include <string>

#include "comm/src/collectives.hpp"
#include "comm/src/slices.hpp"
#include "comm/src/workspace.hpp"
#include "gradcodec/expected_decode.hpp"

namespace gradcodec::comm::detail {

std::uint64_t read_block(run& r, const std::byte* at, std::uint64_t capacity) {
  const auto word = get<std::uint64_t>(at);
  const auto bytes = get<std::uint64_t>(at + 8);
  if (word != 0) {
    // A word that error_word() cannot have made is garbage from the wire, not a report.
    const std::uint64_t code = word & 0xFF, rank = (word & ~(std::uint64_t{1} << 63)) >> 8;
    if ((word >> 63) == 0 || code == 0 ||
        code > static_cast<std::uint64_t>(status_code::internal_error) || rank > max_rank) {
      r.fail({status_code::corrupt_frame, "received a corrupt block header"});
      return 0;
    }
    r.note(word);
    return 0;
  }
  if (bytes > capacity) {
    r.fail({status_code::corrupt_frame, "received a block header longer than its block"});
    return 0;
  }
  return bytes;
}

status read_blocks(run& r, const std::byte* base, std::span<const std::uint64_t> offsets,
                   std::span<const std::uint64_t> capacities, std::vector<std::uint64_t>& lengths,
                   std::vector<frame_header>* frames) {
  const std::size_t n = offsets.size();
  // A block too small for a frame header (an empty chunk's) cannot lend one: then no frame
  // headers are read at all, and the decodes read their own.
  for (std::size_t i = 0; i < n && frames != nullptr; ++i)
    if ((capacities.size() == 1 ? capacities[0] : capacities[i]) < header_bytes) frames = nullptr;
  const std::size_t width = block_header + (frames != nullptr ? header_bytes : 0);
  auto& host = r.ws.host;
  host.resize(n * width);
  bool uniform = n > 0;
  const std::uint64_t pitch = n > 1 ? offsets[1] - offsets[0] : width;
  for (std::size_t i = 1; i < n && uniform; ++i) uniform = offsets[i] - offsets[i - 1] == pitch;
  // One strided copy when the blocks are evenly spaced (one wait on a device), else one each.
  if (uniform) {
    if (auto st = r.mem.download(host.data(), base + offsets[0], width, pitch, n); !st.ok())
      return st;
  } else {
    for (std::size_t i = 0; i < n; ++i)
      if (auto st = r.mem.download(host.data() + i * width, base + offsets[i], width); !st.ok())
        return st;
  }
  lengths.assign(n, 0);
  for (std::size_t i = 0; i < n; ++i)
    lengths[i] = read_block(r, host.data() + i * width,
                            capacities.size() == 1 ? capacities[0] : capacities[i]);
  if (frames == nullptr) return {};
  frames->assign(n, frame_header{});
  for (std::size_t i = 0; i < n && !r.failed(); ++i) {
    // Every block here can hold a frame (no empty chunks): one without is corrupt, as the
    // decode of an empty frame would say.
    if (lengths[i] == 0) {
      r.fail({status_code::corrupt_frame, "truncated: a block without its frame"});
      break;
    }
    auto h = peek({host.data() + i * width + block_header, header_bytes});
    if (!h) {
      r.fail(h.error());
    } else {
      (*frames)[i] = h.value();
    }
  }
  return {};
}

status decode_frames(run& r, std::span<const frame_decode> jobs,
                     std::span<const frame_header> headers) {
  const bool expected = !headers.empty();
  frame_verdict* verdicts =
      expected ? r.ws.verdicts.as<frame_verdict>(jobs.size(), r.mem) : nullptr;
  std::size_t launched = 0;
  status refused;  // a decode that returned an error at once, after the launched ones
  for (std::size_t q = 0; q < jobs.size() && !r.failed() && refused.ok(); ++q) {
    const frame_decode& j = jobs[q];
    const operation op = j.accumulate ? operation::decode_accumulate : operation::decode;
    auto ws = codec_scratch(r, r.cfg.spec, j.out, op);
    if (r.failed() || !frame_aligned(r, j.frame.data())) break;
    if (!expected) {
      const status st = j.accumulate ? decode_accumulate(j.frame, j.out, r.alpha, r.exec(ws))
                                     : decode(j.frame, j.out, r.exec(ws));
      if (!st.ok()) r.fail(st);
      continue;
    }
    refused = j.accumulate ? decode_accumulate_expected(headers[q], j.frame, j.out, r.alpha,
                                                        verdicts + q, r.exec(ws))
                           : decode_expected(headers[q], j.frame, j.out, verdicts + q, r.exec(ws));
    if (refused.ok()) launched = q + 1;  // its verdict will be written
  }
  if (launched > 0) {
    // The one wait: every verdict at once; in frame order, the first failure is the rank's.
    std::vector<frame_verdict> seen(launched);
    if (auto st = r.mem.download(seen.data(), verdicts, launched * sizeof(frame_verdict)); !st.ok())
      return st;  // the memory (the communicator's stream) failed: as a failed block copy
    for (const frame_verdict& v : seen)
      if (auto st = verdict_status(v); !st.ok()) {
        r.fail(st);
        return {};
      }
  }
  if (!refused.ok()) r.fail(refused);
  return {};
}

namespace {

//! The variable-size exchanges' middle step: the W block headers at `headers` read into
//! s.frame_bytes (capacities `caps`), and the padded frames they announce into `sizes`;
//! returns their total.
result<std::uint64_t> size_the_frames(run& r, slot& s, const std::byte* headers,
                                      std::span<const std::uint64_t> caps,
                                      std::vector<std::uint64_t>& sizes) {
  const auto w = static_cast<std::size_t>(r.world);
  s.offsets.resize(w);
  for (std::size_t q = 0; q < w; ++q) s.offsets[q] = q * block_header;
  if (auto st = read_blocks(r, headers, s.offsets, caps, s.frame_bytes); !st.ok()) return st;
  sizes.resize(w);
  std::uint64_t total = 0;
  for (std::size_t q = 0; q < w; ++q) total += sizes[q] = padded(s.frame_bytes[q]);
  return total;
}

}  // namespace

status post_variable_allgather(run& r, slot& s, const std::byte* send, std::uint64_t bytes,
                               std::span<const std::uint64_t> caps, buffer& recv,
                               std::vector<std::uint64_t>& sizes) {
  const auto w = static_cast<std::size_t>(r.world);
  std::byte* headers = s.headers.reserve(w * block_header, r.mem);
  {
    timer t(r.times, &phase_times::comm_s);
    count_traffic(r, block_header, w * block_header);
    if (auto st = r.comm.allgather(send, block_header, headers); !st.ok()) return st;
  }
  const auto total = size_the_frames(r, s, headers, caps, sizes);
  if (!total) return total.error();
  std::byte* into = recv.reserve(total.value() + 1, r.mem);
  count_traffic(r, padded(bytes), total.value());
  timer t(r.times, &phase_times::comm_s);
  return r.comm.iallgatherv(send + block_header, padded(bytes), into, sizes, s.req);
}

status post_variable_alltoall(run& r, slot& s, const std::byte* send,
                              std::vector<std::uint64_t>& send_sizes,
                              std::span<const std::uint64_t> announced, std::uint64_t cap,
                              buffer& recv, std::vector<std::uint64_t>& recv_sizes) {
  const auto w = static_cast<std::size_t>(r.world);
  // The headers: W out, then W in, in s.headers.
  std::byte* headers = s.headers.reserve(2 * w * block_header, r.mem);
  std::uint64_t at = 0;
  for (std::size_t d = 0; d < w; ++d) {
    if (auto st = r.mem.copy(headers + d * block_header, send + at, block_header); !st.ok())
      return st;
    at += send_sizes[d];
  }
  s.lengths.assign(w, block_header);
  std::byte* headers_in = headers + w * block_header;
  {
    timer t(r.times, &phase_times::comm_s);
    count_traffic(r, w * block_header, w * block_header);
    if (auto st = r.comm.alltoallv(headers, s.lengths, headers_in, s.lengths); !st.ok()) return st;
  }
  const std::uint64_t caps[] = {cap};
  const auto in_total = size_the_frames(r, s, headers_in, caps, recv_sizes);
  if (!in_total) return in_total.error();
  std::byte* into = recv.reserve(in_total.value() + 1, r.mem);
  // The frames, packed back to back (each padded) in s.frame.
  std::uint64_t out_total = 0;
  for (std::size_t d = 0; d < w; ++d) out_total += padded(announced[d]);
  std::byte* frames = s.frame.reserve(out_total + 1, r.mem);
  std::uint64_t from = 0, to = 0;
  for (std::size_t d = 0; d < w; ++d) {
    if (announced[d] > 0)
      if (auto st = r.mem.copy(frames + to, send + from + block_header, announced[d]); !st.ok())
        return st;
    from += send_sizes[d];
    send_sizes[d] = padded(announced[d]);
    to += send_sizes[d];
  }
  count_traffic(r, out_total, in_total.value());
  timer t(r.times, &phase_times::comm_s);
  return r.comm.ialltoallv(frames, send_sizes, into, recv_sizes, s.req);
}

}  // namespace gradcodec::comm::detail
