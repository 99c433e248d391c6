// SPDX-License-Identifier: Apache-2.0
//! @file
//! What the GPU's bucketed families share (quant.cu: qsgd, terngrad, minmax; sign.cu: sign,
//! onebit): one frame of per-bucket f32 scales and a packed code stream (docs/format.md),
//! built from the public building blocks, so the arithmetic is the one the host tests prove
//! equal to the reference (tests/test_blocks_fused.cpp).
//!
//! Encode is two kernels. scales_kernel gives each bucket to one warp, or a block for long
//! buckets: the scan (finite? max |v|) and the reductions of the family's formula in the
//! canonical order (blocks/warp.cuh), then the bucket's scales into the payload. codes_kernel
//! gives each thread 32 consecutive elements, exactly `bits` 32-bit words of the code stream,
//! and codes them with the coder of their bucket, rebuilt from the stored scales. Decode is
//! one kernel over the same 32-element groups. Error feedback is the generic composition done
//! on the device: p = g + e into the workspace, encode p, and the decode kernel writes
//! e = p - decoded instead of the decoded values.
//!
//! A Family supplies:
//!   static std::uint32_t per(codec_id);            scales per bucket
//!   static std::uint32_t bits(const frame_shape&); code bits per element
//!   __device__ static void scales(const frame_shape&, std::uint64_t len, V v,
//!                                 const blocks::bucket_scan&, const Reducer&, float s[2]);
//!   struct coder   { __device__ static coder of(const frame_shape&, const float* scales);
//!                    __device__ static bool random(const frame_shape&);   draws u
//!                    __device__ std::uint32_t code(const frame_shape&, float v, float u) const; };
//!   struct decoder { __device__ static decoder of(const frame_shape&, const float* scales);
//!                    __device__ float value(const frame_shape&, std::uint32_t code) const; };
//!   static void fill_header(const codec_spec&, frame_header&);  level, mode and param
#pragma once

#include "common.cuh"
#include "gradcodec/blocks/bitstream.hpp"
#include "gradcodec/blocks/layout.hpp"
#include "gradcodec/blocks/philox.hpp"
#include "gradcodec/blocks/quant.hpp"
#include "gradcodec/blocks/warp.cuh"
#include "launch_policy.cuh"

namespace gradcodec::cuda::bucket {

//! What the kernels need to know about the frame.
struct frame_shape {
  codec_id codec;
  std::uint64_t n;
  std::uint32_t bucket, per, bits;
  std::uint32_t levels;  // qsgd s
  std::uint32_t minmax_bits;
  bool stochastic, max_norm;
  float clip;
  scale_kind scale;
  blocks::counter_rng rng;
  blocks::bucket_layout layout;
};

template <class Family>
frame_shape shape_of_spec(const codec_spec& s, const context& ctx, std::uint64_t n) {
  frame_shape f{};
  f.codec = s.id;
  f.n = n;
  f.bucket = s.bucket;
  f.per = Family::per(s.id);
  f.levels = s.levels;
  f.minmax_bits = s.bits;
  f.bits = Family::bits(f);
  f.stochastic = s.rounding == rounding_mode::stochastic;
  f.max_norm = s.norm == norm_kind::max;
  f.clip = s.clip;
  f.scale = s.scale;
  f.rng = blocks::counter_rng::make(ctx.seed, ctx.step, ctx.tensor_id);
  f.layout = blocks::bucket_layout_of(n, f.bucket, f.per, f.bits);
  return f;
}

template <class Family>
frame_shape shape_of_header(const frame_header& h) {
  frame_shape f{};
  f.codec = h.codec;
  f.n = h.n;
  f.bucket = h.group;
  f.per = Family::per(h.codec);
  f.levels = h.level;
  f.minmax_bits = h.level;
  f.bits = Family::bits(f);
  f.layout = blocks::bucket_layout_of(h.n, f.bucket, f.per, f.bits);
  return f;
}

//! Which threads share a bucket: a warp (the usual buckets of tens to thousands of
//! elements), or a whole block for buckets long enough that a warp each would leave the
//! GPU mostly idle (few buckets) and each warp a long serial pass.
struct warp_per_bucket {
  blocks::warp_reducer red;
  __device__ std::uint64_t first() const { return thread_index() / 32u; }
  __device__ std::uint64_t stride() const { return thread_stride() / 32u; }
  __device__ unsigned rank() const { return threadIdx.x % 32u; }
};
struct block_per_bucket {
  blocks::block_reducer red;
  __device__ std::uint64_t first() const { return blockIdx.x; }
  __device__ std::uint64_t stride() const { return gridDim.x; }
  __device__ unsigned rank() const { return threadIdx.x; }
};

template <class Family, class Group>
__global__ void scales_kernel(frame_shape f, values_in in, std::uint8_t* payload,
                              status_words* st) {
  const Group g;
  const unsigned rank = g.rank();
  float* scales = reinterpret_cast<float*>(payload + f.layout.scales_offset);
  for (std::uint64_t b = g.first(); b < f.layout.buckets; b += g.stride()) {
    const std::uint64_t begin = b * f.bucket;
    const std::uint64_t len = f.n - begin < f.bucket ? f.n - begin : f.bucket;
    const auto v = [&](std::uint64_t j) { return in(begin + j); };
    const blocks::bucket_scan m = g.red.scan(len, v);
    float s[2] = {blocks::canonical_nan(), blocks::canonical_nan()};
    if (m.finite)
      Family::scales(f, len, v, m, g.red, s);
    else if (rank == 0)
      atomicOr(&st->nonfinite, 1u);
    if (rank < f.per) scales[b * f.per + rank] = s[rank];
  }
  if (thread_index() == 0)  // zero padding between the scales and the codes
    for (std::uint64_t k = f.layout.scales_bytes; k < f.layout.codes_offset; ++k) payload[k] = 0;
}

//! The scales of every bucket, by the group kind that keeps the GPU busy for this shape.
template <class Family>
void launch_scales(const frame_shape& f, values_in in, std::uint8_t* payload, status_words* st,
                   cudaStream_t s) {
  const std::uint64_t longest = f.bucket < f.n ? f.bucket : f.n;
  if (longest < policy::block_group_min) {
    scales_kernel<Family, warp_per_bucket>
        <<<grid_for(f.layout.buckets * 32u, policy::threads), policy::threads, 0, s>>>(f, in,
                                                                                       payload, st);
  } else {
    const unsigned block = policy::split_threads(longest);
    scales_kernel<Family, block_per_bucket>
        <<<grid_for(f.layout.buckets * block, block), block, 0, s>>>(f, in, payload, st);
  }
}

//! Thread per group of 32 elements: `bits` words of the code stream, padding included. A
//! Philox block gives four consecutive elements their rounding numbers (blocks::counter_rng:
//! number i is lane i % 4 of block i / 4), so a group draws eight blocks, not 32.
template <class Family>
__global__ void codes_kernel(frame_shape f, values_in in, std::uint8_t* payload) {
  using coder_type = typename Family::coder;
  const float* scales = reinterpret_cast<const float*>(payload + f.layout.scales_offset);
  auto* words = reinterpret_cast<std::uint32_t*>(payload + f.layout.codes_offset);
  const std::uint64_t word_count = (f.layout.total - f.layout.codes_offset) / 4;
  const std::uint64_t groups = (word_count + f.bits - 1) / f.bits;
  const bool random = coder_type::random(f);
  for (std::uint64_t g = thread_index(); g < groups; g += thread_stride()) {
    std::uint32_t codes[32];
    std::uint64_t b = (32 * g) / f.bucket;
    std::uint64_t next = (b + 1) * f.bucket;
    coder_type coder{};
    if (32 * g < f.n) coder = coder_type::of(f, scales + b * f.per);  // else padding words
    blocks::philox_block draws{};
    for (int k = 0; k < 32; ++k) {
      const std::uint64_t i = 32 * g + static_cast<std::uint64_t>(k);
      codes[k] = 0;
      if (i >= f.n) continue;
      if (i == next) {
        ++b;
        next += f.bucket;
        coder = coder_type::of(f, scales + b * f.per);
      }
      if (random && (k & 3) == 0) draws = f.rng.block(blocks::rng_stream::rounding, i >> 2);
      const float u = random ? blocks::uniform01(draws.v[k & 3]) : 0.0f;
      codes[k] = coder.code(f, in(i), u);
    }
    std::uint32_t packed[8];
    blocks::pack32(codes, f.bits, packed);
    for (std::uint32_t w = 0; w < f.bits && g * f.bits + w < word_count; ++w)
      words[g * f.bits + w] = packed[w];
  }
}

template <class Family>
__global__ void decode_kernel(frame_shape f, const std::uint8_t* payload, decode_target out) {
  using decoder_type = typename Family::decoder;
  if (out.closed()) return;
  const float* scales = reinterpret_cast<const float*>(payload + f.layout.scales_offset);
  const std::uint8_t* codes = payload + f.layout.codes_offset;
  const std::uint64_t groups = (f.n + 31) / 32;
  for (std::uint64_t g = thread_index(); g < groups; g += thread_stride()) {
    std::uint64_t b = (32 * g) / f.bucket;
    std::uint64_t next = (b + 1) * f.bucket;
    decoder_type dec = decoder_type::of(f, scales + b * f.per);
    for (std::uint64_t i = 32 * g; i < 32 * g + 32 && i < f.n; ++i) {
      if (i == next) {
        ++b;
        next += f.bucket;
        dec = decoder_type::of(f, scales + b * f.per);
      }
      out.emit(i, dec.value(f, blocks::get_code(codes, i, f.bits)));
    }
  }
}

template <class Family>
status encode_values(const detail::encode_call& c, values_in in) {
  if (auto st = check_frame_alignment(c.payload); !st.ok()) return st;
  const frame_shape f = shape_of_spec<Family>(c.spec, c.ctx, c.in.n);
  if (f.layout.total > c.capacity)
    return {status_code::output_too_small, "output buffer too small for the payload"};
  if (auto st = begin_frame(c.workspace, c.stream); !st.ok()) return st;
  auto* payload = reinterpret_cast<std::uint8_t*>(c.payload);
  const cudaStream_t s = stream_of(c.stream);
  if (f.layout.total > 0) {
    launch_scales<Family>(f, in, payload, status_of(c.workspace), s);
    GRADCODEC_CUDA_LAUNCHED("scales_kernel");
    const std::uint64_t groups =
        ((f.layout.total - f.layout.codes_offset) / 4 + f.bits - 1) / f.bits;
    codes_kernel<Family>
        <<<grid_for(groups, policy::threads), policy::threads, 0, s>>>(f, in, payload);
    GRADCODEC_CUDA_LAUNCHED("codes_kernel");
  }
  c.hdr.group = c.spec.bucket;
  c.hdr.payload_bytes = f.layout.total;
  Family::fill_header(c.spec, c.hdr);
  return finish_frame(c.hdr, c.payload, c.workspace, c.stream);
}

template <class Family>
status decode_into(const detail::decode_call& c, decode_target out) {
  if (auto st = check_frame_alignment(c.payload); !st.ok()) return st;
  const frame_shape f = shape_of_header<Family>(c.hdr);
  if (f.n == 0) return {};
  decode_kernel<Family>
      <<<grid_for((f.n + 31) / 32, policy::threads), policy::threads, 0, stream_of(c.stream)>>>(
          f, reinterpret_cast<const std::uint8_t*>(c.payload), out);
  GRADCODEC_CUDA_LAUNCHED("decode_kernel");
  return {};
}

// ---- A family's four backend operations ----------------------------------------------

inline std::size_t workspace(const codec_spec&, const_tensor_view shape, operation op) {
  // The status words (encodes); error feedback also holds p = g + e (f32).
  return status_only(op) + (op == operation::encode_with_feedback ? shape.n * 4 : 0);
}

template <class Family>
status encode(const detail::encode_call& c) {
  return encode_values<Family>(c, values_in{c.in.data, c.in.type});
}

template <class Family>
status decode(const detail::decode_call& c) {
  return decode_into<Family>(c, target_of(c));
}

template <class Family>
status encode_feedback(const detail::feedback_call& c) {
  return compose_feedback(
      c, reinterpret_cast<float*>(after_status(c.enc.workspace).data()),
      [&](float* p) {
        return encode_values<Family>(c.enc, values_in{p, dtype::f32});
      },
      [](const detail::decode_call& d, decode_target t) { return decode_into<Family>(d, t); });
}

}  // namespace gradcodec::cuda::bucket

//! Defines codecs.hpp's four operations of the family `name` (inside gradcodec::cuda).
#define GRADCODEC_CUDA_BUCKET_FAMILY(name, Family)                                           \
  std::size_t name##_workspace(const codec_spec& s, const_tensor_view shape, operation op) { \
    return bucket::workspace(s, shape, op);                                                  \
  }                                                                                          \
  status name##_encode(const detail::encode_call& c) { return bucket::encode<Family>(c); }   \
  status name##_decode(const detail::decode_call& c) { return bucket::decode<Family>(c); }   \
  status name##_encode_feedback(const detail::feedback_call& c) {                            \
    return bucket::encode_feedback<Family>(c);                                               \
  }
