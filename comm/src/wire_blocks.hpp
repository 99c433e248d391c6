// SPDX-License-Identifier: Apache-2.0
//! @file
//! Blocks on the wire: each frame behind a 16-byte block header (the sender's error word
//! and the frame length), padded to 16 bytes; reading them, and decoding the frames.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "comm/src/buffers.hpp"
#include "comm/src/run.hpp"
#include "gradcodec/frame.hpp"

namespace gradcodec::comm::detail {

//! Every block on the wire starts with 16 bytes: the sender's error word (0 = fine) and
//! the frame's length in bytes (the block may be padded beyond it).
inline constexpr std::uint64_t block_header = 16;
//! Frames travel padded to a multiple of 16 bytes so that each starts 16-byte aligned in
//! a receive buffer (the CUDA kernels require it; device allocations give 256).
inline constexpr std::uint64_t frame_align = 16;
constexpr std::uint64_t padded(std::uint64_t bytes) {
  return (bytes + frame_align - 1) / frame_align * frame_align;
}
inline status put_block(run& r, std::byte* at, std::uint64_t word, std::uint64_t bytes) {
  return r.mem.put_words(at, word, bytes);
}
//! Reads a block header (in host memory), noting an error word; returns the frame length
//! (0 on error or when it exceeds the block's capacity).
std::uint64_t read_block(run& r, const std::byte* at, std::uint64_t capacity);
//! Copies to the host the headers of the blocks at base + offsets[i], then reads them
//! into lengths[i] (capacities[i] each; one capacity for all when it has one entry).
//! With `frames`, the copy also takes the frame header behind each block header (the
//! block's frame starts there) and peeks it into (*frames)[i], in the same wait: what
//! decode_frames needs to decode on a device without waiting for each header.
status read_blocks(run& r, const std::byte* base, std::span<const std::uint64_t> offsets,
                   std::span<const std::uint64_t> capacities, std::vector<std::uint64_t>& lengths,
                   std::vector<frame_header>* frames = nullptr);

//! The frame headers read_blocks should collect: on device memory only (a host decode
//! reads each header in place). Clears the slot's headers of an earlier call either way.
inline std::vector<frame_header>* device_headers(const run& r, slot& s) {
  s.expected.clear();
  return r.mem.space() == memory_space::host ? nullptr : &s.expected;
}

//! Posts the all-gather of variable-size frames (docs/comm.md): every rank's 16-byte block
//! header first (one blocking allgather into s.headers), read into s.frame_bytes with the
//! capacities `caps` (one for all, or one per rank), then exactly each rank's padded frame
//! (an iallgatherv on s.req into `recv`, the padded lengths in `sizes`). `send` is this
//! rank's block: the header, then `bytes` of frame.
status post_variable_allgather(run& r, slot& s, const std::byte* send, std::uint64_t bytes,
                               std::span<const std::uint64_t> caps, buffer& recv,
                               std::vector<std::uint64_t>& sizes);

//! Posts the all-to-all of variable-size frames (docs/comm.md), the reduce-scatter form of
//! the same exchange: the W block headers this rank sends (destination d's at `send` plus
//! the sizes of the blocks before it, `send_sizes`) first, by one blocking alltoallv into
//! s.headers, read into s.frame_bytes with the capacity `cap`; then exactly each
//! destination's padded frame (its `announced` bytes), packed back to back in s.frame, by
//! an ialltoallv on s.req into `recv`, the padded lengths in `recv_sizes`. send_sizes
//! becomes the padded frames sent.
status post_variable_alltoall(run& r, slot& s, const std::byte* send,
                              std::vector<std::uint64_t>& send_sizes,
                              std::span<const std::uint64_t> announced, std::uint64_t cap,
                              buffer& recv, std::vector<std::uint64_t>& recv_sizes);

//! Runs the decodes in order, recording the first failing frame's failure on the run.
//! With `headers` (one per decode, from read_blocks on device memory) each frame is
//! decoded against its header (decode_expected) without a wait, and the verdicts come
//! back in one copy at the end; without, decode reads each frame's header itself. An
//! error only when that copy failed (the memory or its stream is broken).
status decode_frames(run& r, std::span<const frame_decode> jobs,
                     std::span<const frame_header> headers);

}  // namespace gradcodec::comm::detail
