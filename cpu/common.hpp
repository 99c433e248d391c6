// SPDX-License-Identifier: Apache-2.0
//! @file
//! Everything an ISA translation unit includes before it opens its target region
//! (cpu/target.hpp): standard headers, intrinsics, and the library's own headers, all
//! compiled for the baseline ISA.
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "../src/backend.hpp"
#include "gradcodec/blocks/float16.hpp"
#include "gradcodec/blocks/layout.hpp"
#include "gradcodec/blocks/philox.hpp"
#include "target.hpp"
#include "threads.hpp"

namespace gradcodec::cpu {

//! Elements per parallel task for streaming kernels: large enough to amortise the fork,
//! small enough to balance 2-3 threads on 2^20 elements.
inline constexpr std::uint64_t stream_grain = std::uint64_t{1} << 16;

inline status too_small() {
  return {status_code::output_too_small, "output buffer too small for the payload"};
}
inline status corrupt(std::string_view why) { return {status_code::corrupt_frame, why}; }

}  // namespace gradcodec::cpu
