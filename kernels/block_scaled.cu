// SPDX-License-Identifier: Apache-2.0
//! @file
//! The block-scaled codecs (mxfp8, mxfp6, mxfp4, mxint8, nvfp4, fp8row; docs/codecs.md
//! "Block-scaled codecs") on the GPU, built on the per-block rules of blocks/block_scaled.hpp
//! that the reference and the CPU backend use, so the bytes are the same by construction.
//! Encode: a thread per four consecutive blocks (four blocks of codes end on a byte, so no
//! two threads write one byte of the zeroed code stream); nvfp4's tensor scale is the
//! largest finite block maximum, reduced first with an integer atomicMax (non-negative
//! floats order as their bits). Decode: a thread per element, or per block when rotated.
//! Error feedback is the generic composition on the device: p = g + e, encode p, and the
//! residual p - decoded from the frame.
#include "codecs.hpp"
#include "common.cuh"
#include "contract/block_scaled.hpp"
#include "gradcodec/blocks/bitstream.hpp"
#include "gradcodec/blocks/block_scaled.hpp"

namespace gradcodec::cuda {

namespace {

using policy::threads;

//! Blocks per encode thread: a multiple of 4 (even-width codes of 4 blocks end on a byte).
constexpr std::uint64_t blocks_per_thread = 4;

//! Everything a kernel needs of one frame.
struct frame_plan {
  blocks::block_rule rule;
  blocks::block_scaled_layout layout;
  std::uint64_t n, group;
  blocks::counter_rng rng;

  __device__ std::uint64_t length(std::uint64_t b) const {
    const std::uint64_t begin = b * group;
    return n - begin < group ? n - begin : group;
  }
};

//! The f32 bits of nvfp4's tensor scale, little-endian at an unaligned offset.
__device__ void put_u32_le(std::uint8_t* at, std::uint32_t v) {
  for (int k = 0; k < 4; ++k) at[k] = static_cast<std::uint8_t>(v >> (8 * k));
}
__device__ std::uint32_t get_u32_le(const std::uint8_t* at) {
  std::uint32_t v = 0;
  for (int k = 0; k < 4; ++k) v |= static_cast<std::uint32_t>(at[k]) << (8 * k);
  return v;
}

struct code_put {
  std::uint8_t* stream;
  std::uint32_t bits;
  __device__ void operator()(std::uint64_t i, std::uint32_t code) const {
    blocks::put_code(stream, i, bits, code);
  }
};
struct code_value {
  const std::uint8_t* stream;
  blocks::minifloat element;
  __device__ float operator()(std::uint64_t i) const {
    return blocks::element_value(element, blocks::get_code(stream, i, element.bits));
  }
};
struct emit_to {
  decode_target out;
  __device__ void operator()(std::uint64_t i, float x) const { out.emit(i, x); }
};

//! nvfp4: *amax_bits = the largest finite |w| over every block's scan.
__global__ void tensor_amax_kernel(frame_plan f, values_in in, unsigned* amax_bits) {
  const std::uint64_t blocks_total = f.layout.blocks;
  for (std::uint64_t b = thread_index(); b < blocks_total; b += thread_stride()) {
    const blocks::block_scan s = blocks::scan_block(f.rule, f.rng, b * f.group, f.length(b), in);
    if (s.finite) atomicMax(amax_bits, blocks::float_bits(s.amax));
  }
}

__global__ void encode_kernel(frame_plan f, values_in in, const unsigned* amax_bits,
                              std::uint8_t* payload, status_words* st) {
  const float g =
      f.rule.tensor_scale ? blocks::nvfp4_tensor_scale(blocks::bits_float(*amax_bits)) : 0.0f;
  if (thread_index() == 0) {
    if (f.rule.rotate) blocks::write_rng_key(f.rng, payload + f.layout.key_offset);
    if (f.rule.tensor_scale)
      put_u32_le(payload + f.layout.tensor_scale_offset, blocks::float_bits(g));
  }
  const code_put put{payload + f.layout.codes_offset, f.rule.element.bits};
  bool bad = false;
  const std::uint64_t units = (f.layout.blocks + blocks_per_thread - 1) / blocks_per_thread;
  for (std::uint64_t u = thread_index(); u < units; u += thread_stride())
    for (std::uint64_t b = u * blocks_per_thread;
         b < f.layout.blocks && b < (u + 1) * blocks_per_thread; ++b) {
      std::uint32_t scale = 0;
      const blocks::block_scan s =
          blocks::encode_block(f.rule, f.rng, g, b * f.group, f.length(b), in, scale, put);
      blocks::put_block_scale(f.rule, payload + f.layout.scales_offset, b, scale);
      bad |= !s.finite;
    }
  if (bad) atomicOr(&st->nonfinite, 1u);
}

//! nvfp4's tensor scale from the frame (0 for the other codecs).
__device__ float tensor_scale_of(const frame_plan& f, const std::uint8_t* payload) {
  return f.rule.tensor_scale
             ? blocks::bits_float(get_u32_le(payload + f.layout.tensor_scale_offset))
             : 0.0f;
}
//! Block b's quantizer from the frame's scale bytes.
__device__ blocks::block_quantizer quantizer_at(const frame_plan& f, const std::uint8_t* payload,
                                                std::uint64_t b, float g) {
  return blocks::quantizer_of(
      f.rule, blocks::get_block_scale(f.rule, payload + f.layout.scales_offset, b), g);
}

//! Unrotated: x = value(code) * dec, one element per thread (decode_block's arithmetic).
__global__ void decode_kernel(frame_plan f, const std::uint8_t* payload, decode_target out) {
  if (out.closed()) return;
  const code_value value{payload + f.layout.codes_offset, f.rule.element};
  const float g = tensor_scale_of(f, payload);
  for (std::uint64_t i = thread_index(); i < f.n; i += thread_stride())
    out.emit(i, blocks::fmul(value(i), quantizer_at(f, payload, i / f.group, g).dec));
}

//! Rotated: a block per thread, pieces inverted as decode_block does.
__global__ void decode_rotated_kernel(frame_plan f, const std::uint8_t* payload,
                                      decode_target out) {
  if (out.closed()) return;
  const blocks::counter_rng rng = blocks::read_rng_key(payload + f.layout.key_offset);
  const code_value value{payload + f.layout.codes_offset, f.rule.element};
  const float g = tensor_scale_of(f, payload);
  for (std::uint64_t b = thread_index(); b < f.layout.blocks; b += thread_stride())
    blocks::decode_block(f.rule, rng, quantizer_at(f, payload, b, g), b * f.group, f.length(b),
                         value, emit_to{out});
}

frame_plan plan_encode(const detail::encode_call& c) {
  frame_plan f;
  f.rule = detail::block_rule_of(c.spec);
  f.n = c.in.n;
  f.group = detail::block_scaled_group(c.spec, c.in.n, c.in.rows);
  f.layout = blocks::layout_of(f.rule, f.n, f.group);
  f.rng = blocks::counter_rng::make(c.ctx.seed, c.ctx.step, c.ctx.tensor_id);
  return f;
}

//! The device word nvfp4's tensor maximum is reduced into (after the status words).
unsigned* amax_word(mutable_bytes ws) {
  return reinterpret_cast<unsigned*>(after_status(ws).data());
}
//! p = g + e for error feedback, after the amax word.
constexpr std::size_t amax_bytes = 256;
float* feedback_sum_of(mutable_bytes ws) {
  return reinterpret_cast<float*>(after_status(ws).data() + amax_bytes);
}

status encode_values(const detail::encode_call& c, values_in in) {
  if (auto st = check_frame_alignment(c.payload); !st.ok()) return st;
  const frame_plan f = plan_encode(c);
  if (f.layout.total > c.capacity)
    return {status_code::output_too_small, "output buffer too small for the payload"};
  if (auto st = begin_frame(c.workspace, c.stream); !st.ok()) return st;
  if (auto st = zero_bytes(c.payload, 0, f.layout.total, c.stream); !st.ok()) return st;
  unsigned* amax = amax_word(c.workspace);
  GRADCODEC_CUDA_TRY(cudaMemsetAsync(amax, 0, sizeof(unsigned), stream_of(c.stream)));
  if (f.rule.tensor_scale && f.layout.blocks > 0) {
    tensor_amax_kernel<<<grid_for(f.layout.blocks, threads), threads, 0, stream_of(c.stream)>>>(
        f, in, amax);
    GRADCODEC_CUDA_LAUNCHED("block_scaled tensor_amax_kernel");
  }
  const std::uint64_t units = (f.layout.blocks + blocks_per_thread - 1) / blocks_per_thread;
  encode_kernel<<<grid_for(units, threads), threads, 0, stream_of(c.stream)>>>(
      f, in, amax, reinterpret_cast<std::uint8_t*>(c.payload), status_of(c.workspace));
  GRADCODEC_CUDA_LAUNCHED("block_scaled encode_kernel");
  c.hdr.group = static_cast<std::uint32_t>(f.group);
  c.hdr.level = static_cast<std::uint16_t>(c.spec.fmt);
  c.hdr.mode = detail::block_scaled_mode(c.spec);
  c.hdr.payload_bytes = f.layout.total;
  return finish_frame(c.hdr, c.payload, c.workspace, c.stream);
}

status decode_into(const detail::decode_call& c, decode_target out) {
  if (auto st = check_frame_alignment(c.payload); !st.ok()) return st;
  if (c.hdr.n == 0) return {};
  frame_plan f;
  f.rule = blocks::block_rule_of(c.hdr.codec, static_cast<element_format>(c.hdr.level), c.hdr.mode);
  f.n = c.hdr.n;
  f.group = c.hdr.group;
  f.layout = blocks::layout_of(f.rule, f.n, f.group);
  f.rng = {};
  const auto* payload = reinterpret_cast<const std::uint8_t*>(c.payload);
  if (f.rule.rotate) {
    decode_rotated_kernel<<<grid_for(f.layout.blocks, threads), threads, 0, stream_of(c.stream)>>>(
        f, payload, out);
    GRADCODEC_CUDA_LAUNCHED("block_scaled decode_rotated_kernel");
  } else {
    decode_kernel<<<grid_for(f.n, threads), threads, 0, stream_of(c.stream)>>>(f, payload, out);
    GRADCODEC_CUDA_LAUNCHED("block_scaled decode_kernel");
  }
  return {};
}

}  // namespace

std::size_t block_scaled_workspace(const codec_spec&, const_tensor_view shape, operation op) {
  if (is_decode(op)) return 0;
  return status_bytes + amax_bytes + (op == operation::encode_with_feedback ? shape.n * 4 : 0);
}

status block_scaled_encode(const detail::encode_call& c) {
  return encode_values(c, values_in{c.in.data, c.in.type});
}

status block_scaled_decode(const detail::decode_call& c) { return decode_into(c, target_of(c)); }

status block_scaled_encode_feedback(const detail::feedback_call& c) {
  return compose_feedback(
      c, feedback_sum_of(c.enc.workspace),
      [&](float* p) {
        return encode_values(c.enc, values_in{p, dtype::f32});
      },
      [](const detail::decode_call& d, decode_target t) { return decode_into(d, t); });
}

}  // namespace gradcodec::cuda
