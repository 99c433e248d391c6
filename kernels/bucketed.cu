// SPDX-License-Identifier: Apache-2.0
//! @file
//! The bucketed codecs on the GPU: qsgd, terngrad, minmax, sign and onebit (docs/codecs.md).
//! Built from the public building blocks, so the arithmetic is the one the host tests
//! prove equal to the reference (tests/test_blocks_fused.cpp).
//!
//! Encode is two kernels. scales_kernel gives each bucket to one warp, or a block for long
//! buckets: the scan (finite? max |v|) and the reductions of the codec's formula in the
//! canonical order (blocks/warp.cuh), then the bucket's scales into the payload. codes_kernel gives
//! each thread 32 consecutive elements, exactly `bits` 32-bit words of the code stream, and
//! quantizes them with the quantizer of their bucket, rebuilt from the stored scales.
//! Decode is one kernel over the same 32-element groups. Error feedback is the generic
//! composition done on the device: p = g + e into the workspace, encode p, and the decode
//! kernel writes e = p - decoded instead of the decoded values.
#include "codecs.hpp"
#include "common.cuh"
#include "gradcodec/blocks/bitstream.hpp"
#include "gradcodec/blocks/layout.hpp"
#include "gradcodec/blocks/philox.hpp"
#include "gradcodec/blocks/quant.hpp"
#include "gradcodec/blocks/sign.hpp"
#include "gradcodec/blocks/warp.cuh"

namespace gradcodec::cuda {

namespace {

using policy::threads;

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

std::uint32_t per_bucket(codec_id id) {
  return id == codec_id::minmax || id == codec_id::onebit ? 2u : 1u;
}
std::uint32_t bits_of(codec_id id, std::uint32_t levels, std::uint32_t minmax_bits) {
  switch (id) {
    case codec_id::qsgd: return blocks::qsgd_code_bits(levels);
    case codec_id::terngrad: return blocks::terngrad_code_bits;
    case codec_id::minmax: return minmax_bits;
    default: return 1;
  }
}

frame_shape shape_of_spec(const codec_spec& s, const context& ctx, std::uint64_t n) {
  frame_shape f{};
  f.codec = s.id;
  f.n = n;
  f.bucket = s.bucket;
  f.per = per_bucket(s.id);
  f.levels = s.levels;
  f.minmax_bits = s.bits;
  f.bits = bits_of(s.id, s.levels, s.bits);
  f.stochastic = s.rounding == rounding_mode::stochastic;
  f.max_norm = s.norm == norm_kind::max;
  f.clip = s.clip;
  f.scale = s.scale;
  f.rng = blocks::counter_rng::make(ctx.seed, ctx.step, ctx.tensor_id);
  f.layout = blocks::bucket_layout_of(n, f.bucket, f.per, f.bits);
  return f;
}

frame_shape shape_of_header(const frame_header& h) {
  frame_shape f{};
  f.codec = h.codec;
  f.n = h.n;
  f.bucket = h.group;
  f.per = per_bucket(h.codec);
  f.levels = h.level;
  f.minmax_bits = h.level;
  f.bits = bits_of(h.codec, h.level, h.level);
  f.layout = blocks::bucket_layout_of(h.n, f.bucket, f.per, f.bits);
  return f;
}

using input = values_in;

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

template <class Group>
__global__ void scales_kernel(frame_shape f, input in, std::uint8_t* payload, status_words* st) {
  const Group g;
  const unsigned rank = g.rank();
  float* scales = reinterpret_cast<float*>(payload + f.layout.scales_offset);
  for (std::uint64_t b = g.first(); b < f.layout.buckets; b += g.stride()) {
    const std::uint64_t begin = b * f.bucket;
    const std::uint64_t len = f.n - begin < f.bucket ? f.n - begin : f.bucket;
    const auto v = [&](std::uint64_t j) { return in(begin + j); };
    const auto& red = g.red;
    const blocks::bucket_scan m = red.scan(len, v);
    float s[2] = {blocks::canonical_nan(), blocks::canonical_nan()};
    if (m.finite) {
      switch (f.codec) {
        case codec_id::qsgd: s[0] = blocks::qsgd_norm(len, v, m, f.max_norm, red); break;
        case codec_id::terngrad:
          s[0] = blocks::terngrad_quantizer::of(
                     m, blocks::terngrad_clip_bound(len, v, m.max_abs, f.clip, red))
                     .scale;
          break;
        case codec_id::minmax: {
          const blocks::minmax_range r = red.range(len, v);
          s[0] = r.lo;
          s[1] = r.hi;
          break;
        }
        case codec_id::sign: s[0] = blocks::sign_scale(f.scale, len, v, m.max_abs, red); break;
        case codec_id::onebit: blocks::onebit_means(len, v, m.max_abs, s, red); break;
        default: break;
      }
    } else if (rank == 0) {
      atomicOr(&st->nonfinite, 1u);
    }
    if (rank < f.per) scales[b * f.per + rank] = s[rank];
  }
  if (thread_index() == 0)  // zero padding between the scales and the codes
    for (std::uint64_t k = f.layout.scales_bytes; k < f.layout.codes_offset; ++k) payload[k] = 0;
}

//! The scales of every bucket, by the group kind that keeps the GPU busy for this shape.
void launch_scales(const frame_shape& f, input in, std::uint8_t* payload, status_words* st,
                   cudaStream_t s) {
  const std::uint64_t longest = f.bucket < f.n ? f.bucket : f.n;
  if (longest < policy::block_group_min) {
    scales_kernel<warp_per_bucket>
        <<<grid_for(f.layout.buckets * 32u, threads), threads, 0, s>>>(f, in, payload, st);
  } else {
    const unsigned block = policy::split_threads(longest);
    scales_kernel<block_per_bucket>
        <<<grid_for(f.layout.buckets * block, block), block, 0, s>>>(f, in, payload, st);
  }
}

//! The code of element i of a bucket, from the bucket's stored scales.
struct bucket_coder {
  blocks::qsgd_quantizer q;
  blocks::terngrad_quantizer t;
  blocks::minmax_quantizer mm;
  float scale0;

  __device__ static bucket_coder of(const frame_shape& f, const float* s) {
    bucket_coder c{};
    c.scale0 = s[0];
    switch (f.codec) {
      case codec_id::qsgd: c.q = blocks::qsgd_quantizer::of(s[0], f.levels); break;
      case codec_id::terngrad: c.t = blocks::terngrad_quantizer::from_scale(s[0]); break;
      case codec_id::minmax: c.mm = blocks::minmax_quantizer::of(s[0], s[1], f.minmax_bits); break;
      default: break;
    }
    return c;
  }
  //! Whether the codes draw a rounding number (u below): stochastic rounding, TernGrad.
  __device__ static bool random(const frame_shape& f) {
    return f.codec == codec_id::terngrad ||
           (f.stochastic && (f.codec == codec_id::qsgd || f.codec == codec_id::minmax));
  }
  //! The code of value v; u is uniform01 of the element's rounding number (0 if not random).
  __device__ std::uint32_t code(const frame_shape& f, float v, float u) const {
    switch (f.codec) {
      case codec_id::qsgd: return q.code(v, f.stochastic, u);
      case codec_id::terngrad: return t.code(v, u);
      case codec_id::minmax: return mm.code(v, f.stochastic, u);
      default: return blocks::sign_code(scale0, v);
    }
  }
};

//! Thread per group of 32 elements: `bits` words of the code stream, padding included. A
//! Philox block gives four consecutive elements their rounding numbers (blocks::counter_rng:
//! number i is lane i % 4 of block i / 4), so a group draws eight blocks, not 32.
__global__ void codes_kernel(frame_shape f, input in, std::uint8_t* payload) {
  const float* scales = reinterpret_cast<const float*>(payload + f.layout.scales_offset);
  auto* words = reinterpret_cast<std::uint32_t*>(payload + f.layout.codes_offset);
  const std::uint64_t word_count = (f.layout.total - f.layout.codes_offset) / 4;
  const std::uint64_t groups = (word_count + f.bits - 1) / f.bits;
  const bool random = bucket_coder::random(f);
  for (std::uint64_t g = thread_index(); g < groups; g += thread_stride()) {
    std::uint32_t codes[32];
    std::uint64_t b = (32 * g) / f.bucket;
    std::uint64_t next = (b + 1) * f.bucket;
    bucket_coder coder{};
    if (32 * g < f.n) coder = bucket_coder::of(f, scales + b * f.per);  // else padding words
    blocks::philox_block draws{};
    for (int k = 0; k < 32; ++k) {
      const std::uint64_t i = 32 * g + static_cast<std::uint64_t>(k);
      codes[k] = 0;
      if (i >= f.n) continue;
      if (i == next) {
        ++b;
        next += f.bucket;
        coder = bucket_coder::of(f, scales + b * f.per);
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

//! Decoded value of element i from its bucket's stored scales.
struct bucket_decoder {
  blocks::qsgd_dequantizer q;
  blocks::minmax_dequantizer mm;
  float s[2];

  __device__ static bucket_decoder of(const frame_shape& f, const float* scales) {
    bucket_decoder d{};
    d.s[0] = scales[0];
    d.s[1] = f.per > 1 ? scales[1] : 0.0f;
    if (f.codec == codec_id::qsgd) d.q = blocks::qsgd_dequantizer::of(d.s[0], f.levels);
    if (f.codec == codec_id::minmax)
      d.mm = blocks::minmax_dequantizer::of(d.s[0], d.s[1], f.minmax_bits);
    return d;
  }
  __device__ float value(const frame_shape& f, std::uint32_t code) const {
    switch (f.codec) {
      case codec_id::qsgd: return q.value(code);
      case codec_id::terngrad: return blocks::terngrad_value(s[0], code);
      case codec_id::minmax: return mm.value(code);
      case codec_id::sign: return blocks::sign_value(s[0], code);
      default: return blocks::onebit_value(s, code);
    }
  }
};

__global__ void decode_kernel(frame_shape f, const std::uint8_t* payload, decode_target out) {
  if (out.closed()) return;
  const float* scales = reinterpret_cast<const float*>(payload + f.layout.scales_offset);
  const std::uint8_t* codes = payload + f.layout.codes_offset;
  const std::uint64_t groups = (f.n + 31) / 32;
  for (std::uint64_t g = thread_index(); g < groups; g += thread_stride()) {
    std::uint64_t b = (32 * g) / f.bucket;
    std::uint64_t next = (b + 1) * f.bucket;
    bucket_decoder dec = bucket_decoder::of(f, scales + b * f.per);
    for (std::uint64_t i = 32 * g; i < 32 * g + 32 && i < f.n; ++i) {
      if (i == next) {
        ++b;
        next += f.bucket;
        dec = bucket_decoder::of(f, scales + b * f.per);
      }
      out.emit(i, dec.value(f, blocks::get_code(codes, i, f.bits)));
    }
  }
}

void fill_header(const codec_spec& s, const blocks::bucket_layout& l, frame_header& h) {
  h.group = s.bucket;
  h.payload_bytes = l.total;
  switch (s.id) {
    case codec_id::qsgd:
      h.level = static_cast<std::uint16_t>(s.levels);
      h.mode = static_cast<std::uint8_t>(
          (s.rounding == rounding_mode::stochastic ? mode_stochastic : 0) |
          (s.norm == norm_kind::max ? mode_norm_max : 0));
      break;
    case codec_id::terngrad: h.param = s.clip; break;
    case codec_id::minmax:
      h.level = static_cast<std::uint16_t>(s.bits);
      h.mode = s.rounding == rounding_mode::stochastic ? mode_stochastic : 0;
      break;
    case codec_id::sign:
      h.mode = static_cast<std::uint8_t>(static_cast<unsigned>(s.scale) << mode_scale_shift);
      break;
    default: break;
  }
}

status encode_values(const detail::encode_call& c, input in) {
  if (auto st = check_frame_alignment(c.payload); !st.ok()) return st;
  const frame_shape f = shape_of_spec(c.spec, c.ctx, c.in.n);
  if (f.layout.total > c.capacity)
    return {status_code::output_too_small, "output buffer too small for the payload"};
  if (auto st = begin_frame(c.workspace, c.stream); !st.ok()) return st;
  auto* payload = reinterpret_cast<std::uint8_t*>(c.payload);
  const cudaStream_t s = stream_of(c.stream);
  if (f.layout.total > 0) {
    launch_scales(f, in, payload, status_of(c.workspace), s);
    GRADCODEC_CUDA_LAUNCHED("scales_kernel");
    const std::uint64_t groups =
        ((f.layout.total - f.layout.codes_offset) / 4 + f.bits - 1) / f.bits;
    codes_kernel<<<grid_for(groups, threads), threads, 0, s>>>(f, in, payload);
    GRADCODEC_CUDA_LAUNCHED("codes_kernel");
  }
  fill_header(c.spec, f.layout, c.hdr);
  return finish_frame(c.hdr, c.payload, c.workspace, c.stream);
}

status decode_into(const detail::decode_call& c, decode_target out) {
  if (auto st = check_frame_alignment(c.payload); !st.ok()) return st;
  const frame_shape f = shape_of_header(c.hdr);
  if (f.n == 0) return {};
  decode_kernel<<<grid_for((f.n + 31) / 32, threads), threads, 0, stream_of(c.stream)>>>(
      f, reinterpret_cast<const std::uint8_t*>(c.payload), out);
  GRADCODEC_CUDA_LAUNCHED("decode_kernel");
  return {};
}

}  // namespace

std::size_t bucketed_workspace(const codec_spec&, const_tensor_view shape, operation op) {
  // The status words (encodes); error feedback also holds p = g + e (f32).
  return status_only(op) + (op == operation::encode_with_feedback ? shape.n * 4 : 0);
}

status bucketed_encode(const detail::encode_call& c) {
  return encode_values(c, input{c.in.data, c.in.type});
}

status bucketed_decode(const detail::decode_call& c) { return decode_into(c, target_of(c)); }

status bucketed_encode_feedback(const detail::feedback_call& c) {
  return compose_feedback(
      c, reinterpret_cast<float*>(after_status(c.enc.workspace).data()),
      [&](float* p) {
        return encode_values(c.enc, input{p, dtype::f32});
      },
      [](const detail::decode_call& d, decode_target t) { return decode_into(d, t); });
}

}  // namespace gradcodec::cuda
