// SPDX-License-Identifier: Apache-2.0
//! @file
//! The kernels behind gradcodec::sign_majority_vote (include/gradcodec/vote.hpp). The public
//! function in src/vote.cpp checks every frame, then runs these: the CPU backend's
//! (cpu/kernels/vote-inl.hpp, for the active ISA) when the library has one, else the plain
//! scalar code of reference/vote.cpp, which is the oracle the CPU ones are tested against. Both
//! write the same bytes (docs/codecs.md "Majority vote").
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>

#include "gradcodec/blocks/layout.hpp"
#include "gradcodec/frame.hpp"
#include "gradcodec/status.hpp"
#include "gradcodec/views.hpp"

namespace gradcodec::detail {

//! One vote, after the front end checked it: every frame is a `sign` frame of exactly its
//! frame size, all with n elements in buckets of `bucket`, and out holds n elements.
//! values[k] holds the bytes (out's element size of them) the vote writes: [0] a positive
//! sum (alpha), [1] a negative one (-alpha), [2] a tie (alpha * 0), [3] a poisoned bucket
//! (a NaN scale in any frame); every NaN among them is the canonical NaN.
struct vote_call {
  std::span<const const_bytes> frames;
  blocks::bucket_layout layout;
  std::uint64_t n, bucket;
  tensor_view out;
  std::byte values[4][4];
};

//! The code stream of frame f (layout.codes_bytes bytes, element i at bit i % 8 of byte i / 8).
inline const std::byte* vote_codes(const vote_call& c, std::size_t f) {
  return c.frames[f].data() + header_bytes + c.layout.codes_offset;
}

//! Whether bucket b comes out NaN: its scale is NaN in some frame.
inline bool vote_poisoned(const vote_call& c, std::uint64_t b) {
  for (const const_bytes& frame : c.frames) {
    float s;
    std::memcpy(&s, frame.data() + header_bytes + c.layout.scales_offset + b * 4, 4);
    if (std::isnan(s)) return true;
  }
  return false;
}

struct vote_kernels {
  const char* name;
  void (*vote)(const vote_call& c);
};

//! The scalar kernel (reference/vote.cpp): the oracle, and the reference backend's.
const vote_kernels& vote_scalar_kernels() noexcept;
//! sign_majority_vote with the given kernels (the public function passes those of the host
//! backend codec calls choose: the CPU backend's for the pinned ISA, else the reference's;
//! tests pass each).
status majority_vote_with(const vote_kernels& k, std::span<const const_bytes> frames,
                          tensor_view out, float alpha) noexcept;

}  // namespace gradcodec::detail
