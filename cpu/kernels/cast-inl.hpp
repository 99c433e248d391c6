// SPDX-License-Identifier: Apache-2.0
//! @file
//! fp16 / bf16 casts (docs/codecs.md): one streaming pass, 16 lanes at a time, threads
//! over disjoint ranges; error feedback fused into the same pass. Included inside an ISA
//! namespace (see cpu/table-inl.hpp).

inline std::size_t cast_workspace(const codec_spec&, const_tensor_view, operation) { return 0; }

//! Encode, or with a residual the fused error feedback of the generic composition: p = g + e
//! in f32, p sent rounded to the half type, e = p - (what the decoder reads back). The half
//! type and the feedback switch are template parameters so that the loop is straight-line
//! code (a run-time dtype switch per vector doubled the time of bf16).
template <bool BF16, bool Feedback>
inline void cast_range(const detail::encode_call& c, tensor_view res, std::uint64_t begin,
                       std::uint64_t end, mask16& bad) {
  auto* out = reinterpret_cast<std::uint16_t*>(c.payload);
  constexpr dtype half = BF16 ? dtype::bf16 : dtype::f16;
  for (std::uint64_t i = begin; i < end; i += 16) {
    const unsigned r = end - i >= 16 ? 16u : static_cast<unsigned>(end - i);
    vf16 p = r == 16 ? vload_any(c.in.data, c.in.type, i) : vload_any_n(c.in.data, c.in.type, i, r);
    if constexpr (Feedback)
      p = vadd_nan_first(
          p, r == 16 ? vload_any(res.data, res.type, i) : vload_any_n(res.data, res.type, i, r));
    bad |= vnonfinite(p);
    if (r < 16) {
      vstore_any_n(out, half, i, p, r);
    } else if constexpr (BF16) {
      vstore_bf16(out + i, p);
    } else {
      vstore_f16(out + i, p);
    }
    if constexpr (Feedback) {
      const vf16 sent = r < 16 ? vload_any_n(out, half, i, r)
                        : BF16 ? vload_bf16(out + i)
                               : vload_f16(out + i);
      if (r == 16)
        vstore_any(res.data, res.type, i, p - sent);
      else
        vstore_any_n(res.data, res.type, i, p - sent, r);
    }
  }
}

inline status cast_run(const detail::encode_call& c, tensor_view res) {
  const std::uint64_t bytes = blocks::cast_payload_bytes(c.in.n);
  if (bytes > c.capacity) return too_small();
  const bool bf16 = c.spec.id == codec_id::bf16;
  const std::uint64_t tasks = blocks::ceil_div(c.in.n, stream_grain);
  std::atomic<bool> nonfinite{false};
  parallel_for(threads_for(c.threads, tasks), tasks, [&](std::uint64_t t) {
    const std::uint64_t begin = t * stream_grain, end = std::min(c.in.n, begin + stream_grain);
    mask16 bad = 0;
    if (bf16)
      res.data ? cast_range<true, true>(c, res, begin, end, bad)
               : cast_range<true, false>(c, res, begin, end, bad);
    else
      res.data ? cast_range<false, true>(c, res, begin, end, bad)
               : cast_range<false, false>(c, res, begin, end, bad);
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
      vstore_any(c.out.data, c.out.type, i, vcanonical_nan(v));
    }
    if (i < end) {
      const unsigned r = static_cast<unsigned>(end - i);
      vf16 v = vload_any_n(c.payload, half, i, r);
      if (c.accumulate) v = vfma(alpha, v, vload_any_n(c.out.data, c.out.type, i, r));
      vstore_any_n(c.out.data, c.out.type, i, vcanonical_nan(v), r);
    }
  });
  return {};
}
