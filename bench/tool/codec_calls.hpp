// SPDX-License-Identifier: Apache-2.0
//! @file
//! The library calls the tool makes, with its protocols: the backend option, output
//! buffers sized by encode_bound, scratch sized by workspace_size and allocated here.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "args.hpp"
#include "gradcodec/gradcodec.hpp"

namespace gradcodec::tool {

//! The --backend option: unknown name -> usage error; a backend not built or without a
//! device -> error.
exec_options exec_from_args(const parsed_args& args);

//! parse_spec, with a bad spec reported as a usage error naming `what`.
codec_spec spec_from_text(const std::string& what, const std::string& text);

//! Scratch for one operation on a tensor of this shape (workspace_size bytes).
std::vector<std::byte> allocate_workspace(const codec_spec& spec, const_tensor_view shape,
                                          operation op, const exec_options& opt);

//! Encodes into a buffer of encode_bound() bytes; returns the frame (trimmed to its size).
std::vector<std::byte> encode_tensor(const codec_spec& spec, const context& ctx,
                                     const_tensor_view in, const exec_options& opt);

//! The rows of a decode output view: PowerSGD frames carry their matrix rows (count);
//! other codecs get the array's own rows.
std::uint64_t decode_rows(const frame_header& h, std::uint64_t array_rows) noexcept;

//! Decodes a frame (already checked by peek) into `out`, with workspace from the frame's spec.
void decode_frame(const_bytes frame, const frame_header& h, tensor_view out,
                  const exec_options& opt);

}  // namespace gradcodec::tool
