// SPDX-License-Identifier: Apache-2.0
//! @file
//! The CUDA kernels' launch shapes in one place: the tuning values a measurement on a GPU
//! may change. One set serves sm_80 and sm_90 until a GPU has measured a better one for
//! either; a per-architecture choice goes here. No result depends on them: every reduction
//! follows the canonical order of docs/codecs.md, fixed by element indices, not by blocks.
#pragma once

namespace gradcodec::cuda::policy {

//! Element-wise and grid-stride kernels. A multiple of 32, so no warp straddles two blocks
//! (the warp-per-row, warp-per-bucket and warp-per-entry kernels rely on it).
inline constexpr unsigned threads = 256;
//! The radix histogram: each block clears and flushes its 2048 shared bins with these.
inline constexpr unsigned hist_threads = 512;
//! Selection tiles: tile_threads threads of tile_items consecutive elements each.
inline constexpr unsigned tile_threads = 256;
inline constexpr unsigned tile_items = 16;

//! Groups reduced by a whole block (the PowerSGD orthogonalization's columns, long
//! buckets): a warp per this many terms (two chunks of the canonical sum per round), up to
//! group_max_warps, a power of two of warps.
inline constexpr unsigned group_terms_per_warp = 512;
inline constexpr unsigned group_max_warps = 32;
//! Buckets of at least this many elements get a block each instead of a warp.
inline constexpr unsigned block_group_min = 8192;

//! The threads of a block that splits one group of `len` terms.
constexpr unsigned split_threads(unsigned long long len) {
  unsigned warps = 1;
  while (warps < group_max_warps &&
         static_cast<unsigned long long>(warps) * group_terms_per_warp < len)
    warps *= 2;
  return 32u * warps;
}

static_assert(threads % 32 == 0 && hist_threads % 32 == 0 && tile_threads % 32 == 0);
static_assert((group_max_warps & (group_max_warps - 1)) == 0 && group_max_warps <= 32);
static_assert(split_threads(1) == 32 && split_threads(513) == 64 &&
              split_threads(1u << 30) == 1024);

}  // namespace gradcodec::cuda::policy
