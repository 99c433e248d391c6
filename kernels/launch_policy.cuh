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

//! The PowerSGD orthogonalization: one block per matrix, a warp per this many rows (two
//! chunks of the canonical sum per round), up to orth_max_warps; a power of two of warps.
inline constexpr unsigned orth_rows_per_warp = 512;
inline constexpr unsigned orth_max_warps = 32;

static_assert(threads % 32 == 0 && hist_threads % 32 == 0 && tile_threads % 32 == 0);
static_assert((orth_max_warps & (orth_max_warps - 1)) == 0 && orth_max_warps <= 32);

}  // namespace gradcodec::cuda::policy
