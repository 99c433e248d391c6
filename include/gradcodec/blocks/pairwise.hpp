// SPDX-License-Identifier: Apache-2.0
//! @file
//! The pairwise combination step of the canonical sum (docs/codecs.md "Canonical sum",
//! step 4): chunk sums pushed in order merge like a binary counter, so the result depends
//! only on the number of chunks. Shared by the reference, the CPU kernels and (as
//! __host__ __device__ code) the CUDA kernels; no allocation, 2^64 chunks at most.
#pragma once

#include "config.hpp"
#include "fmath.hpp"

namespace gradcodec::blocks {

struct pairwise_sum {
  float part[64];
  int height[64];
  int top = 0;

  //! Adds the next chunk sum (h = 0), or the sum of the next 2^h chunk sums computed as
  //! their complete subtree (a parallel reduction's share), which must start at a multiple
  //! of 2^h chunks: it merges with every entry of the same height below it.
  GRADCODEC_HD void push(float s, int h = 0) {
    while (top > 0 && height[top - 1] == h) {
      s = fadd(part[--top], s);
      ++h;
    }
    part[top] = s;
    height[top++] = h;
  }

  //! The sum of everything pushed: the remaining entries, newest first (0 when empty).
  GRADCODEC_HD float total() const {
    if (top == 0) return 0.0f;
    int t = top;
    float s = part[--t];
    while (t > 0) s = fadd(part[--t], s);
    return s;
  }
};

}  // namespace gradcodec::blocks
