// SPDX-License-Identifier: Apache-2.0
//! @file
//! Reference block-scaled codecs (docs/codecs.md "Block-scaled codecs"): mxfp8, mxfp6,
//! mxfp4, mxint8, nvfp4 and fp8row, one block after the other. The per-block rules are
//! blocks/block_scaled.hpp's (the element conversion is checked against ml_dtypes by
//! python_bindings/tests/test_mx_formats.py, whole frames against hand-derived bytes by
//! tests/test_ref_block_scaled.cpp).
#include "contract/block_scaled.hpp"
#include "bucket.hpp"
#include "gradcodec/blocks/block_scaled.hpp"

namespace gradcodec::reference {

std::size_t block_scaled_workspace(const codec_spec&, const_tensor_view, operation) { return 0; }

status block_scaled_encode(const detail::encode_call& c) {
  const std::uint64_t n = c.in.n;
  const blocks::block_rule rule = detail::block_rule_of(c.spec);
  const std::uint64_t group = detail::block_scaled_group(c.spec, n, c.in.rows);
  const blocks::block_scaled_layout l = blocks::layout_of(rule, n, group);
  if (l.total > c.capacity) return too_small();
  std::fill(c.payload + 0, c.payload + l.total, std::byte{0});
  auto* payload = reinterpret_cast<std::uint8_t*>(c.payload);
  const auto rng = blocks::counter_rng::make(c.ctx.seed, c.ctx.step, c.ctx.tensor_id);
  if (rule.rotate) blocks::write_rng_key(rng, payload + l.key_offset);
  const auto in = [&](std::uint64_t i) { return load(c.in, i); };

  float g = 0.0f;  // nvfp4: from the blocks whose inputs are all finite
  if (rule.tensor_scale) {
    float a = 0.0f;
    for (std::uint64_t b = 0; b < l.blocks; ++b) {
      const bucketed::span sp = bucketed::bucket_at(n, group, b);
      const blocks::block_scan s = blocks::scan_block(rule, rng, sp.begin, sp.len, in);
      if (s.finite && s.amax > a) a = s.amax;
    }
    g = blocks::nvfp4_tensor_scale(a);
    put<float>(c.payload + l.tensor_scale_offset, g);
  }

  for (std::uint64_t b = 0; b < l.blocks; ++b) {
    const bucketed::span sp = bucketed::bucket_at(n, group, b);
    std::uint32_t scale = 0;
    const blocks::block_scan s = blocks::encode_block(
        rule, rng, g, sp.begin, sp.len, in, scale, [&](std::uint64_t i, std::uint32_t code) {
          put_bits(c.payload + l.codes_offset, i, rule.element.bits, code);
        });
    blocks::put_block_scale(rule, payload + l.scales_offset, b, scale);
    if (!s.finite) c.hdr.flags |= flag_nonfinite;  // its codes stay 0
  }
  c.hdr.group = static_cast<std::uint32_t>(group);
  c.hdr.level = static_cast<std::uint16_t>(c.spec.fmt);
  c.hdr.mode = detail::block_scaled_mode(c.spec);
  c.hdr.payload_bytes = l.total;
  return {};
}

status block_scaled_decode(const detail::decode_call& c) {
  const std::uint64_t n = c.hdr.n;
  const blocks::block_rule rule =
      blocks::block_rule_of(c.hdr.codec, static_cast<element_format>(c.hdr.level), c.hdr.mode);
  const blocks::block_scaled_layout l = blocks::layout_of(rule, n, c.hdr.group);
  const auto* payload = reinterpret_cast<const std::uint8_t*>(c.payload);
  const blocks::counter_rng rng =
      rule.rotate ? blocks::read_rng_key(payload + l.key_offset) : blocks::counter_rng{};
  const float g = rule.tensor_scale ? get<float>(c.payload + l.tensor_scale_offset) : 0.0f;
  // Every scale and code decodes to a defined value: nothing in the payload needs checking.
  for (std::uint64_t b = 0; b < l.blocks; ++b) {
    const bucketed::span sp = bucketed::bucket_at(n, c.hdr.group, b);
    const auto q =
        blocks::quantizer_of(rule, blocks::get_block_scale(rule, payload + l.scales_offset, b), g);
    blocks::decode_block(
        rule, rng, q, sp.begin, sp.len,
        [&](std::uint64_t i) {
          return blocks::element_value(rule.element,
                                       get_bits(c.payload + l.codes_offset, i, rule.element.bits));
        },
        [&](std::uint64_t i, float x) { emit(c, i, x); });
  }
  return {};
}

}  // namespace gradcodec::reference
