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

//! Decodes elements [sb, se) of the half payload (H) to dst (dtype O, element sb there);
//! Acc: dst += alpha * decoded.
template <dtype H, dtype O, bool Acc>
inline void cast_decode_range(const std::byte* payload, vf16 alpha, std::byte* dst,
                              std::uint64_t sb, std::uint64_t se) {
  std::uint64_t i = sb;
  for (; i + 16 <= se; i += 16) {
    vf16 v = vload_typed<H>(payload, i);
    if constexpr (Acc) v = vfma(alpha, v, vload_typed<O>(dst, i - sb));
    vstore_typed<O>(dst, i - sb, vcanonical_nan(v));
  }
  if (i < se) {
    const unsigned r = static_cast<unsigned>(se - i);
    vf16 v = vload_typed_n<H>(payload, i, r);
    if constexpr (Acc) v = vfma(alpha, v, vload_typed_n<O>(dst, i - sb, r));
    vstore_typed_n<O>(dst, i - sb, vcanonical_nan(v), r);
  }
}

inline status cast_decode(const detail::decode_call& c) {
  const dtype half = c.hdr.codec == codec_id::fp16 ? dtype::f16 : dtype::bf16;
  const std::uint64_t n = c.hdr.n;
  const std::uint64_t tasks = blocks::ceil_div(n, stream_grain);
  const vf16 alpha = vset1(c.alpha);
  auto* out = static_cast<std::byte*>(c.out.data);
  const std::size_t osize = dtype_size(c.out.type);
  // A large output that nothing reads first is written staged.
  const bool staged = !c.accumulate && staged_output(n, osize);
  const auto run = [&]<dtype H, dtype O, bool Acc>() {
    parallel_for(threads_for(c.threads, tasks), tasks, [&](std::uint64_t t) {
      const std::uint64_t begin = t * stream_grain, end = std::min(n, begin + stream_grain);
      write_staged(out, osize, begin, end, staged,
                   [&](std::byte* dst, std::uint64_t sb, std::uint64_t se) {
                     cast_decode_range<H, O, Acc>(c.payload, alpha, dst, sb, se);
                   });
    });
  };
  with_dtype(c.out.type, [&]<dtype O>() {
    if (half == dtype::f16)
      c.accumulate ? run.template operator()<dtype::f16, O, true>()
                   : run.template operator()<dtype::f16, O, false>();
    else
      c.accumulate ? run.template operator()<dtype::bf16, O, true>()
                   : run.template operator()<dtype::bf16, O, false>();
  });
  return {};
}

// This family's rows of the variant's table (cpu/ops-inl.hpp).
GRADCODEC_CPU_CODEC_ROW(cast);
