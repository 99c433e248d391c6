// SPDX-License-Identifier: Apache-2.0
//! @file
//! Reference fp16 / bf16 casts (docs/codecs.md "fp16, bf16"): each value rounded to
//! nearest even; NaN and Inf survive as themselves, f16 overflow becomes Inf.
#include "common.hpp"

namespace gradcodec::reference {

std::size_t cast_workspace(const codec_spec&, const_tensor_view, operation) { return 0; }

status cast_encode(const detail::encode_call& c) {
  const std::uint64_t bytes = blocks::cast_payload_bytes(c.in.n);
  if (bytes > c.capacity) return too_small();
  const dtype half = c.spec.id == codec_id::fp16 ? dtype::f16 : dtype::bf16;
  for (std::uint64_t i = 0; i < c.in.n; ++i) {
    const float v = load(c.in, i);
    if (!finite(v)) c.hdr.flags |= flag_nonfinite;
    put_value(c.payload + 2 * i, half, v);
  }
  std::fill(c.payload + 2 * c.in.n, c.payload + bytes, std::byte{0});
  c.hdr.payload_bytes = bytes;
  return {};
}

status cast_decode(const detail::decode_call& c) {
  const dtype half = c.hdr.codec == codec_id::fp16 ? dtype::f16 : dtype::bf16;
  for (std::uint64_t i = 0; i < c.hdr.n; ++i) emit(c, i, get_value(c.payload + 2 * i, half));
  return {};
}

}  // namespace gradcodec::reference
