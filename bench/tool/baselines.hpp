// SPDX-License-Identifier: Apache-2.0
//! @file
//! The baselines of `gradcodec bench`, single-threaded on the data the codecs read: memcpy
//! and a read-only sum (the roofline), std::nth_element and binary-heap (BytePS) top-k at
//! ratio 0.01, and a two-pass min-max 4-bit quantizer with buckets of 512 (CGX).
#pragma once

#include "bench_report.hpp"
#include "host_measure.hpp"

namespace gradcodec::tool {

//! Adds one row per baseline, memcpy first (it sets st.memcpy_gbps, the %memcpy column).
void run_baselines(run_state& st, host_memory& mem);

}  // namespace gradcodec::tool
