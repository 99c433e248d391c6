// SPDX-License-Identifier: Apache-2.0
//! @file
//! signSGD majority vote over `sign` frames (docs/codecs.md "Majority vote"): the checks of
//! the public function, then the kernel of contract/vote_kernels.hpp: the CPU backend's
//! when the library has one, else the scalar oracle (reference/vote.cpp).
#include "gradcodec/vote.hpp"

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>

#include "contract/backend.hpp"
#include "contract/scalar_values.hpp"
#include "contract/vote_kernels.hpp"
#include "gradcodec/blocks/float16.hpp"
#include "gradcodec/blocks/layout.hpp"
#include "gradcodec/frame.hpp"

namespace gradcodec {
namespace {

//! A status whose message names the offending frame (no allocation: status keeps it inline).
status frame_error(status_code code, std::size_t index, const char* what) {
  char msg[status::max_message + 1];
  std::snprintf(msg, sizeof msg, "frame %zu: %s", index, what);
  return {code, msg};
}

void put16(std::byte* dst, std::uint16_t h) { std::memcpy(dst, &h, 2); }

//! The bytes of x in dtype t, its NaN canonical: compilers fold `alpha * -1.0f` into a sign
//! flip while the hardware keeps a NaN's sign, so a NaN's bits would depend on the build.
void vote_value_bytes(std::byte* dst, float x, dtype t) {
  x = detail::canonical_nan(x);
  switch (t) {
    case dtype::f32: std::memcpy(dst, &x, 4); return;
    case dtype::f16: put16(dst, blocks::f32_to_f16(x)); return;
    case dtype::bf16: put16(dst, blocks::f32_to_bf16(x)); return;
  }
}

}  // namespace

namespace detail {

status majority_vote_with(const vote_kernels& k, std::span<const const_bytes> frames,
                          tensor_view out, float alpha) noexcept {
  if (frames.empty()) return {status_code::invalid_argument, "majority vote of no frames"};
  if (frames.size() > 0xFFFFFFFFu)  // the counts are 32-bit
    return {status_code::invalid_argument, "majority vote of more than 2^32 - 1 frames"};
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

  vote_call c{frames, blocks::bucket_layout_of(n, bucket, 1, 1), n, bucket, out, {}};
  vote_value_bytes(c.values[0], alpha * 1.0f, out.type);
  vote_value_bytes(c.values[1], alpha * -1.0f, out.type);
  vote_value_bytes(c.values[2], alpha * 0.0f, out.type);
  vote_value_bytes(c.values[3], std::numeric_limits<float>::quiet_NaN(), out.type);
  k.vote(c);
  return {};
}

}  // namespace detail

status sign_majority_vote(std::span<const const_bytes> frames, tensor_view out,
                          float alpha) noexcept {
  // The host backend a codec call on host memory runs on: the CPU backend, else the reference.
  const detail::backend_table* t = detail::cpu_backend();
  if (t == nullptr || t->vote == nullptr) t = &detail::reference_backend();
  return detail::majority_vote_with(*t->vote, frames, out, alpha);
}

}  // namespace gradcodec
