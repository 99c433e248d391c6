// SPDX-License-Identifier: Apache-2.0
//! @file
//! fp16 / bf16 casts (docs/codecs.md): one streaming pass, 16 lanes at a time, threads
//! over disjoint ranges; error feedback fused into the same pass. Included inside an ISA
//! namespace (see cpu/table-inl.hpp).

inline std::size_t cast_workspace(const codec_spec&, const_tensor_view, operation) { return 0; }

//! Encode, or with a residual the fused error feedback of the generic composition: p = g + e
//! in f32, p sent rounded to the half type, e = p - (what the decoder reads back).
inline status cast_run(const detail::encode_call& c, tensor_view res) {
  const std::uint64_t bytes = blocks::cast_payload_bytes(c.in.n);
  if (bytes > c.capacity) return too_small();
  const dtype half = c.spec.id == codec_id::fp16 ? dtype::f16 : dtype::bf16;
  auto* out = reinterpret_cast<std::uint16_t*>(c.payload);
  const std::uint64_t tasks = blocks::ceil_div(c.in.n, stream_grain);
  std::atomic<bool> nonfinite{false};
  parallel_for(threads_for(c.threads, tasks), tasks, [&](std::uint64_t t) {
    const std::uint64_t begin = t * stream_grain, end = std::min(c.in.n, begin + stream_grain);
    mask16 bad = 0;
    // One vector of r (<= 16) values at i.
    auto one = [&](std::uint64_t i, unsigned r) {
      vf16 p =
          r == 16 ? vload_any(c.in.data, c.in.type, i) : vload_any_n(c.in.data, c.in.type, i, r);
      if (res.data)
        p = p +
            (r == 16 ? vload_any(res.data, res.type, i) : vload_any_n(res.data, res.type, i, r));
      bad |= vnonfinite(p);
      if (r == 16)
        vstore_any(out, half, i, p);
      else
        vstore_any_n(out, half, i, p, r);
      if (!res.data) return;
      const vf16 e = p - (r == 16 ? vload_any(out, half, i) : vload_any_n(out, half, i, r));
      if (r == 16)
        vstore_any(res.data, res.type, i, e);
      else
        vstore_any_n(res.data, res.type, i, e, r);
    };
    std::uint64_t i = begin;
    for (; i + 16 <= end; i += 16) one(i, 16);
    if (i < end) one(i, static_cast<unsigned>(end - i));
    if (bad) nonfinite.store(true, std::memory_order_relaxed);
  });
  std::memset(c.payload + 2 * c.in.n, 0, bytes - 2 * c.in.n);
  if (nonfinite.load()) c.hdr.flags |= flag_nonfinite;
  c.hdr.payload_bytes = bytes;
  return {};
}

inline status cast_encode(const detail::encode_call& c) { return cast_run(c, {}); }
inline status cast_encode_feedback(const detail::feedback_call& f) {
  return cast_run(f.enc, f.residual);
}

inline status cast_decode(const detail::decode_call& c) {
  const dtype half = c.hdr.codec == codec_id::fp16 ? dtype::f16 : dtype::bf16;
  const std::uint64_t n = c.hdr.n;
  const std::uint64_t tasks = blocks::ceil_div(n, stream_grain);
  const vf16 alpha = vset1(c.alpha);
  parallel_for(threads_for(c.threads, tasks), tasks, [&](std::uint64_t t) {
    const std::uint64_t begin = t * stream_grain, end = std::min(n, begin + stream_grain);
    std::uint64_t i = begin;
    for (; i + 16 <= end; i += 16) {
      vf16 v = vload_any(c.payload, half, i);
      if (c.accumulate) v = vfma(alpha, v, vload_any(c.out.data, c.out.type, i));
      vstore_any(c.out.data, c.out.type, i, v);
    }
    if (i < end) {
      const unsigned r = static_cast<unsigned>(end - i);
      vf16 v = vload_any_n(c.payload, half, i, r);
      if (c.accumulate) v = vfma(alpha, v, vload_any_n(c.out.data, c.out.type, i, r));
      vstore_any_n(c.out.data, c.out.type, i, v, r);
    }
  });
  return {};
}
