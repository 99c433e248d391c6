// SPDX-License-Identifier: Apache-2.0
//! @file
//! The block-scaled codecs (mxfp8, mxfp6, mxfp4, mxint8, nvfp4, fp8row; docs/codecs.md
//! "Block-scaled codecs") on the CPU: tasks of whole blocks in parallel, each block by the
//! rules of blocks/block_scaled.hpp, so the bytes equal the reference's by construction.
//! Error feedback uses the front end's generic composition.

//! Blocks per task: about stream_grain elements, and a multiple of 4 blocks so that no two
//! tasks write one byte of the code stream (4 blocks of even-width codes end on a byte).
inline std::uint64_t block_scaled_blocks_per_task(std::uint64_t group) {
  const std::uint64_t per = std::max<std::uint64_t>(1, stream_grain / group);
  return blocks::ceil_div(per, 4) * 4;
}

//! Calls fn(load) with load(i) reading input i as f32: a plain load for f32 inputs, so the
//! per-element work has no dtype switch.
template <class Fn>
inline void block_scaled_with_input(const_tensor_view in, Fn&& fn) {
  if (in.type == dtype::f32)
    fn(f32_load{static_cast<const float*>(in.data)});
  else
    fn(any_load{in.data, in.type});
}

//! Writes the codes of elements [begin, begin + len) into the zeroed stream: whole bytes
//! for 8-bit codes and byte-aligned pairs of 4-bit ones, else code by code.
inline void block_scaled_put_codes(std::uint8_t* stream, std::uint64_t begin, std::uint64_t len,
                                   std::uint32_t bits, const std::uint32_t* codes) {
  if (bits == 8) {
    for (std::uint64_t j = 0; j < len; ++j) stream[begin + j] = static_cast<std::uint8_t>(codes[j]);
    return;
  }
  std::uint64_t j = 0;
  if (bits == 4 && begin % 2 == 0)
    for (; j + 1 < len; j += 2)
      stream[(begin + j) / 2] = static_cast<std::uint8_t>(codes[j] | (codes[j + 1] << 4));
  for (; j < len; ++j) blocks::put_code(stream, begin + j, bits, codes[j]);
}

inline std::size_t block_scaled_workspace(const codec_spec&, const_tensor_view, operation) {
  return 0;
}

inline status block_scaled_encode(const detail::encode_call& c) {
  const std::uint64_t n = c.in.n;
  const blocks::block_rule rule = detail::block_rule_of(c.spec);
  const std::uint64_t group = detail::block_scaled_group(c.spec, n, c.in.rows);
  const blocks::block_scaled_layout l = blocks::layout_of(rule, n, group);
  if (l.total > c.capacity) return too_small();
  std::memset(c.payload, 0, l.total);
  auto* payload = reinterpret_cast<std::uint8_t*>(c.payload);
  const auto rng = blocks::counter_rng::make(c.ctx.seed, c.ctx.step, c.ctx.tensor_id);
  if (rule.rotate) blocks::write_rng_key(rng, payload + l.key_offset);
  const std::uint64_t per = block_scaled_blocks_per_task(group);
  const std::uint64_t tasks = blocks::ceil_div(l.blocks, per);
  const int threads = threads_for(c.threads, tasks);
  const auto span_of = [&](std::uint64_t b) {
    const std::uint64_t begin = b * group;
    return std::pair{begin, std::min(n - begin, group)};
  };

  float g = 0.0f;
  if (rule.tensor_scale) {
    // Non-negative floats order as their bits.
    std::atomic<std::uint32_t> amax_bits{0};
    parallel_for(threads, tasks, [&](std::uint64_t t) {
      float a = 0.0f;
      for (std::uint64_t b = t * per; b < std::min(l.blocks, (t + 1) * per); ++b) {
        const auto [begin, len] = span_of(b);
        const blocks::block_scan s =
            blocks::scan_block(rule, rng, begin, len, any_load{c.in.data, c.in.type});
        if (s.finite && s.amax > a) a = s.amax;
      }
      std::uint32_t seen = amax_bits.load(std::memory_order_relaxed);
      const std::uint32_t mine = blocks::float_bits(a);
      while (mine > seen && !amax_bits.compare_exchange_weak(seen, mine)) {
      }
    });
    g = blocks::nvfp4_tensor_scale(blocks::bits_float(amax_bits.load()));
    std::memcpy(payload + l.tensor_scale_offset, &g, 4);
  }

  std::atomic<bool> nonfinite{false};
  block_scaled_with_input(c.in, [&](const auto& in) {
    parallel_for(threads, tasks, [&](std::uint64_t t) {
      std::uint32_t codes[blocks::max_rotation_piece];  // a short block's codes, then packed
      for (std::uint64_t b = t * per; b < std::min(l.blocks, (t + 1) * per); ++b) {
        const auto [begin, len] = span_of(b);
        const bool buffered = len <= blocks::max_rotation_piece;
        std::uint32_t scale = 0;
        const blocks::block_scan s =
            buffered
                ? blocks::encode_block(rule, rng, g, begin, len, in, scale,
                                       code_to_buffer{codes, begin})
                : blocks::encode_block(rule, rng, g, begin, len, in, scale,
                                       code_to_stream{payload + l.codes_offset, rule.element.bits});
        blocks::put_block_scale(rule, payload + l.scales_offset, b, scale);
        if (!s.finite) nonfinite.store(true, std::memory_order_relaxed);
        if (buffered && s.finite)
          block_scaled_put_codes(payload + l.codes_offset, begin, len, rule.element.bits, codes);
      }
    });
  });
  if (nonfinite.load()) c.hdr.flags |= flag_nonfinite;
  c.hdr.group = static_cast<std::uint32_t>(group);
  c.hdr.level = static_cast<std::uint16_t>(c.spec.fmt);
  c.hdr.mode = detail::block_scaled_mode(c.spec);
  c.hdr.payload_bytes = l.total;
  return {};
}

inline status block_scaled_decode(const detail::decode_call& c) {
  const std::uint64_t n = c.hdr.n, group = c.hdr.group;
  const blocks::block_rule rule =
      blocks::block_rule_of(c.hdr.codec, static_cast<element_format>(c.hdr.level), c.hdr.mode);
  const blocks::block_scaled_layout l = blocks::layout_of(rule, n, group);
  const auto* payload = reinterpret_cast<const std::uint8_t*>(c.payload);
  const blocks::counter_rng rng =
      rule.rotate ? blocks::read_rng_key(payload + l.key_offset) : blocks::counter_rng{};
  float g = 0.0f;
  if (rule.tensor_scale) std::memcpy(&g, payload + l.tensor_scale_offset, 4);
  // Every code's value, once per call: element_value's bits from a table.
  float values[256];
  for (std::uint32_t k = 0; k < (1u << rule.element.bits); ++k)
    values[k] = blocks::element_value(rule.element, k);
  const std::uint64_t per = block_scaled_blocks_per_task(group);
  const std::uint64_t tasks = blocks::ceil_div(l.blocks, per);
  parallel_for(threads_for(c.threads, tasks), tasks, [&](std::uint64_t t) {
    for (std::uint64_t b = t * per; b < std::min(l.blocks, (t + 1) * per); ++b) {
      const std::uint64_t begin = b * group;
      const auto q = blocks::quantizer_of(
          rule, blocks::get_block_scale(rule, payload + l.scales_offset, b), g);
      blocks::decode_block(rule, rng, q, begin, std::min(n - begin, group),
                           element_from_table{values, payload + l.codes_offset, rule.element.bits},
                           value_to_output{c.out, c.alpha, c.accumulate});
    }
  });
  return {};
}
