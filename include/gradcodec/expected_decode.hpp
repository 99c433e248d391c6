// SPDX-License-Identifier: Apache-2.0
//! @file
//! Decode against an expected header, with the verdict written where the frame lives.
//!
//! decode() reads a frame's header before it launches anything, which on the GPU means a
//! copy to the host and a wait. When the receiver already knows what the frame must look
//! like (the codec, parameters, element count and dtype it agreed on with the sender, as
//! in a compressed allreduce), decode_expected() needs no wait: the header is checked
//! where the frame is (on the GPU by a kernel), the outcome goes into a frame_verdict in
//! the frame's memory, and the decode kernels write nothing unless it says ok. So a
//! decode can be captured in a CUDA graph, and a series of decodes checked with one wait
//! at the end (verdict_status on a host copy of each verdict).
#pragma once

#include <cstdint>
#include <type_traits>

#include "gradcodec/codec.hpp"
#include "gradcodec/format.hpp"
#include "gradcodec/frame.hpp"
#include "gradcodec/status.hpp"
#include "gradcodec/views.hpp"

namespace gradcodec {

//! Decodes `frame` into `out` (expected.n elements) when its header equals `expected` in
//! every field but three that may differ from frame to frame of the same codec: the
//! non-finite flag, the checksum, and for threshold and dgc the count and payload size
//! (checked for consistency with each other, with n and with the frame's length instead).
//! `frame` is the frame exactly, except for threshold and dgc, whose frame may lie at the
//! start of a longer buffer (a capacity: a padded receive slot, or the largest frame a
//! captured CUDA graph will see); bytes past its payload are not read.
//! `expected` is any frame_header that peek() returned for a frame of the same codec,
//! parameters, n and dtype, e.g. of this rank's own encode; it is checked on the host.
//!
//! Errors in the arguments (views, memory, workspace, an invalid `expected`) are returned
//! and nothing is launched or written. Otherwise the call writes the verdict, and the
//! output only when the verdict is ok: on the CUDA backend both happen in stream order on
//! opt.stream, with no host synchronization, and the call returns ok unless a launch
//! failed (check both: a failed launch leaves the verdict unwritten or ok but the output
//! not decoded); on host backends they happen before the call returns, which also returns
//! verdict_status(*verdict). The bytes decoded and the verdict codes are the same on
//! every backend.
status decode_expected(const frame_header& expected, const_bytes frame, tensor_view out,
                       frame_verdict* verdict, const exec_options& opt = {}) noexcept;

//! acc += alpha * decode(frame) under the same checks as decode_expected.
status decode_accumulate_expected(const frame_header& expected, const_bytes frame, tensor_view acc,
                                  float alpha, frame_verdict* verdict,
                                  const exec_options& opt = {}) noexcept;

//! A verdict (read on the host) as a status: ok, unsupported_version, or corrupt_frame
//! with a message naming what was wrong.
status verdict_status(const frame_verdict& v) noexcept;

}  // namespace gradcodec
