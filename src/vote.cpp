// SPDX-License-Identifier: Apache-2.0
//! @file
//! signSGD majority vote over `sign` frames (docs/codecs.md "Majority vote").
#include "gradcodec/vote.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>

#include "gradcodec/blocks/float16.hpp"
#include "gradcodec/blocks/layout.hpp"
#include "gradcodec/frame.hpp"

namespace gradcodec {
namespace {

constexpr std::uint32_t canonical_nan_bits = 0x7FC00000u;

//! A status whose message names the offending frame (no allocation: status keeps it inline).
status frame_error(status_code code, std::size_t index, const char* what) {
  char msg[status::max_message + 1];
  std::snprintf(msg, sizeof msg, "frame %zu: %s", index, what);
  return {code, msg};
}

void store(tensor_view v, std::uint64_t i, float x) {
  switch (v.type) {
    case dtype::f32: static_cast<float*>(v.data)[i] = x; break;
    case dtype::f16: static_cast<std::uint16_t*>(v.data)[i] = blocks::f32_to_f16(x); break;
    case dtype::bf16: static_cast<std::uint16_t*>(v.data)[i] = blocks::f32_to_bf16(x); break;
  }
}

float scale_of(const_bytes frame, const blocks::bucket_layout& l, std::uint64_t b) {
  float s;
  std::memcpy(&s, frame.data() + header_bytes + l.scales_offset + b * 4, 4);
  return s;
}

bool negative_bit(const_bytes frame, const blocks::bucket_layout& l, std::uint64_t i) {
  const auto byte = static_cast<std::uint8_t>(frame[header_bytes + l.codes_offset + i / 8]);
  return ((byte >> (i % 8)) & 1u) != 0;
}

}  // namespace

status sign_majority_vote(std::span<const const_bytes> frames, tensor_view out,
                          float alpha) noexcept {
  if (frames.empty()) return {status_code::invalid_argument, "majority vote of no frames"};
  if (!dtype_valid(static_cast<std::uint8_t>(out.type)))
    return {status_code::invalid_argument, "output: unknown dtype"};
  if (out.n > 0 && out.data == nullptr) return {status_code::invalid_argument, "output: null data"};

  std::uint64_t n = 0;
  std::uint32_t bucket = 0;
  for (std::size_t f = 0; f < frames.size(); ++f) {
    auto h = peek(frames[f]);
    if (!h) return frame_error(h.error().code(), f, h.error().message());
    if (h.value().codec != codec_id::sign)
      return frame_error(status_code::corrupt_frame, f, "not a sign frame");
    if (frames[f].size() != h.value().frame_bytes())
      return frame_error(status_code::corrupt_frame, f,
                         "length differs from the header's frame size");
    if (f == 0) {
      n = h.value().n;
      bucket = h.value().group;
    } else if (h.value().n != n) {
      return frame_error(status_code::shape_mismatch, f, "element count differs from frame 0");
    } else if (h.value().group != bucket) {
      return frame_error(status_code::shape_mismatch, f, "bucket size differs from frame 0");
    }
  }
  if (out.n != n)
    return {status_code::shape_mismatch, "output length differs from the frames' element count"};

  const blocks::bucket_layout l = blocks::bucket_layout_of(n, bucket, 1, 1);
  float nan;
  std::memcpy(&nan, &canonical_nan_bits, 4);
  for (std::uint64_t b = 0; b < l.buckets; ++b) {
    const std::uint64_t begin = b * bucket;
    const std::uint64_t end = std::min(n, begin + bucket);
    bool poisoned = false;
    for (const const_bytes& frame : frames)
      poisoned = poisoned || std::isnan(scale_of(frame, l, b));
    for (std::uint64_t i = begin; i < end; ++i) {
      if (poisoned) {
        store(out, i, nan);
        continue;
      }
      std::int64_t c = 0;
      for (const const_bytes& frame : frames) c += negative_bit(frame, l, i) ? -1 : 1;
      const float s = c > 0 ? 1.0f : c < 0 ? -1.0f : 0.0f;
      store(out, i, alpha * s);
    }
  }
  return {};
}

}  // namespace gradcodec
