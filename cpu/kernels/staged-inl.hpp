// SPDX-License-Identifier: Apache-2.0
//! @file
//! Staged writes of a large output: its elements are built block by block in an L1 buffer
//! and copied out with streaming stores (vstream), so each output line is written once and
//! never read for ownership. For the decodes that build their output element by element in
//! any dtype: sparse (a zero fill, then a scatter) and the casts. (Staging the casts'
//! encoded payload was measured and not kept: no faster for fp16, slower for bf16, whose
//! encode is bound by its rounding arithmetic, on a Zen 3 VM, 2026-12-02.) Included inside
//! an ISA namespace (see cpu/table-inl.hpp).

//! Bytes of the L1 buffer one staged block is built in: whole lines for 2- and 4-byte
//! elements.
inline constexpr std::size_t staged_block_bytes = 16384;

//! Whether an output of n elements of `size` bytes is written staged: at least
//! stream_store_bytes (an output that fits in the caches is better left there). Outputs are
//! tensors, aligned to their element size (the front end checks), so one of their elements
//! starts a 64-byte line. The scalar variant never stages: its vstream is a plain store.
inline bool staged_output(std::uint64_t n, std::size_t size) {
  return GRADCODEC_CPU_LEVEL > 0 && n * size >= stream_store_bytes;
}

//! Writes elements [b, e) of the output at out (elements of `size` bytes) through
//! fill(dst, sb, se), which writes elements [sb, se) at dst, where element sb goes; fill is
//! called for consecutive ranges in order, each at most one block long, so that what it
//! writes stays in L1 while it works. Staged (see staged_output), whole blocks from the
//! first 64-byte boundary on are built in an L1 buffer and streamed out; the elements before
//! that boundary and the last partial block are written in place.
template <class Fill>
inline void write_staged(std::byte* out, std::size_t size, std::uint64_t b, std::uint64_t e,
                         bool staged, Fill&& fill) {
  const std::uint64_t per = staged_block_bytes / size;
  std::uint64_t i = b;
  if (staged) {
    const std::uint64_t head =
        std::min<std::uint64_t>(e - b, elements_to_line(out + b * size, size));
    if (head > 0) fill(out + b * size, b, b + head);
    for (i = b + head; e - i >= per; i += per) {
      alignas(64) std::byte stage[staged_block_bytes];
      fill(stage, i, i + per);
      for (std::size_t at = 0; at < staged_block_bytes; at += 64)
        vstream(reinterpret_cast<float*>(out + i * size + at),
                vload(reinterpret_cast<const float*>(stage + at)));
    }
  }
  for (; i < e; i += std::min(per, e - i)) fill(out + i * size, i, i + std::min(per, e - i));
  if (staged) vstream_fence();
}
