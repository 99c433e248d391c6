// SPDX-License-Identifier: Apache-2.0
//! @file
//! The 16-lane vector types every CPU kernel is written against: vf16 (16 x f32), vu16
//! (16 x u32) and mask16. Sixteen lanes are the canonical lane count of docs/codecs.md, so
//! a kernel written once gives identical results as one AVX-512 register, two AVX2
//! registers, or sixteen scalars. Included inside an ISA namespace (cpu/family-inl.hpp)
//! with GRADCODEC_CPU_LEVEL = 0 (scalar), 1 (AVX2) or 2 (AVX-512); no std includes here.
//! All operations are lane-wise IEEE operations, so every level rounds identically.
//!
//! The operations each level implements are in cpu/simd/<isa>-inl.hpp, one file per ISA;
//! cpu/simd/scalar-inl.hpp is the lane-by-lane definition and documents each one. This
//! file holds what is common: the mask type, the inlining rules, and the helpers built
//! on the per-ISA operations.

using mask16 = std::uint16_t;

// The 16-lane helpers are always inlined in the SIMD variants: an out-of-line call passes
// vectors through memory and costs a vzeroupper (GCC left vstore_bf16 out of line, which
// made bf16 stores slower than scalar code). The scalar variant keeps plain inline: its
// helpers are 16-iteration loops, and forcing them inline multiplies its compile time.
#undef GRADCODEC_VINLINE
#if GRADCODEC_CPU_LEVEL == 0
#define GRADCODEC_VINLINE inline
#else
#define GRADCODEC_VINLINE inline __attribute__((always_inline))
#endif
// A lambda that a hot loop calls once per vector, from more than one place, is forced
// inline too: placed after its parameter list, [&](vf16 p) GRADCODEC_VLAMBDA { ... }. At -O2
// (RelWithDebInfo) GCC 12 left such lambdas out of line, and top-k's filter pass, the
// threshold encode and the quantizers' group loop then passed every vector through the stack.
#undef GRADCODEC_VLAMBDA
#define GRADCODEC_VLAMBDA __attribute__((always_inline))

//! Lanes set in m.
GRADCODEC_VINLINE unsigned vpopcount(mask16 m) {
  return static_cast<unsigned>(__builtin_popcount(m));
}

#if GRADCODEC_CPU_LEVEL == 2
#include "simd/avx512-inl.hpp"
#elif GRADCODEC_CPU_LEVEL == 1
#include "simd/avx2-inl.hpp"
#else
#include "simd/scalar-inl.hpp"
#endif

// ---- Level-independent helpers built on the primitives -------------------------------

GRADCODEC_VINLINE vf16 vabs(vf16 a) { return vfrombits(vbits(a) & vset1u(0x7FFFFFFFu)); }
//! Lanes holding NaN or +-Inf.
GRADCODEC_VINLINE mask16 vnonfinite(vf16 a) {
  const vu16 mag = vbits(a) & vset1u(0x7FFFFFFFu);
  return static_cast<mask16>(~vltu(mag, vset1u(0x7F800000u)));
}

//! NaN lanes become detail::canonical_nan_bits: what every decoder writes.
GRADCODEC_VINLINE vf16 vcanonical_nan(vf16 a) {
  return vfrombits(vselect_nan(a, vset1u(detail::canonical_nan_bits), vbits(a)));
}

//! bf16 widening is exact: the 16 bits become the top of an f32.
GRADCODEC_VINLINE vf16 vload_bf16(const std::uint16_t* p) {
  return vfrombits(vshl(vload_u16(p), 16));
}
//! f32 -> bf16 with round to nearest even, NaN kept quiet (blocks::f32_to_bf16, lane-wise).
GRADCODEC_VINLINE void vstore_bf16(std::uint16_t* p, vf16 a) {
  const vu16 x = vbits(a);
  const vu16 rounded = vshr(x + vset1u(0x7FFFu) + (vshr(x, 16) & vset1u(1u)), 16);
  const vu16 quiet = vshr(x, 16) | vset1u(0x40u);
  vstore_u16(p, vselect_nan(a, quiet, rounded));
}

//! Loads 16 values of any dtype as f32.
GRADCODEC_VINLINE vf16 vload_any(const void* base, dtype t, std::uint64_t i) {
  switch (t) {
    case dtype::f16: return vload_f16(static_cast<const std::uint16_t*>(base) + i);
    case dtype::bf16: return vload_bf16(static_cast<const std::uint16_t*>(base) + i);
    case dtype::f32: break;
  }
  return vload(static_cast<const float*>(base) + i);
}
//! Loads the first n (< 16) values of any dtype; the other lanes are +0.0.
GRADCODEC_VINLINE vf16 vload_any_n(const void* base, dtype t, std::uint64_t i, unsigned n) {
  if (t == dtype::f32) return vload_n(static_cast<const float*>(base) + i, n);
  std::uint16_t tmp[16] = {};
  std::memcpy(tmp, static_cast<const std::uint16_t*>(base) + i, n * 2u);
  return t == dtype::f16 ? vload_f16(tmp) : vload_bf16(tmp);
}
//! Stores 16 values in any dtype (rounded to nearest even for f16/bf16).
GRADCODEC_VINLINE void vstore_any(void* base, dtype t, std::uint64_t i, vf16 a) {
  switch (t) {
    case dtype::f16: vstore_f16(static_cast<std::uint16_t*>(base) + i, a); return;
    case dtype::bf16: vstore_bf16(static_cast<std::uint16_t*>(base) + i, a); return;
    case dtype::f32: break;
  }
  vstore(static_cast<float*>(base) + i, a);
}
GRADCODEC_VINLINE void vstore_any_n(void* base, dtype t, std::uint64_t i, vf16 a, unsigned n) {
  if (t == dtype::f32) return vstore_n(static_cast<float*>(base) + i, a, n);
  std::uint16_t tmp[16];
  if (t == dtype::f16)
    vstore_f16(tmp, a);
  else
    vstore_bf16(tmp, a);
  std::memcpy(static_cast<std::uint16_t*>(base) + i, tmp, n * 2u);
}

//! Lanes all ones where a == b (a != b), zero elsewhere: lane values for vselect_bits.
GRADCODEC_VINLINE vu16 vequ_bits(vu16 a, std::uint32_t b) {
  return vminu(a ^ vset1u(b), vset1u(1)) - vset1u(1);
}
GRADCODEC_VINLINE vu16 vneu_bits(vu16 a, std::uint32_t b) {
  return vset1u(0) - vminu(a ^ vset1u(b), vset1u(1));
}

// ---- Signed compare and ordered compaction (sparse selection) -------------------------
// vgti compares lanes as signed 32-bit integers: selection keys are below 2^31, where it
// equals the unsigned order and is one instruction on AVX2. vcompress_store writes the
// lanes selected by m, in lane order, to p[0..count) and returns count; it may also write
// p[count..16), so p must have room for 16 values.

// ---- Streaming stores (large decode outputs) -------------------------------------------
// vstream stores 16 f32 values at a 64-byte aligned p, bypassing the caches where the level
// can (a write-only output larger than the caches then costs no read-for-ownership).
// Stores made with it are weakly ordered: a task that used it calls vstream_fence() before
// it ends, so the caller sees the values after the join. Values are those of vstore.

//! Outputs at least this large are written with vstream (sign, the vote, and the staged
//! writes of cpu/kernels/staged-inl.hpp: sparse decode, casts): larger
//! than the caches, they would be evicted before use anyway, and skipping the
//! read-for-ownership of every output line is most of the write bandwidth.
inline constexpr std::uint64_t stream_store_bytes = std::uint64_t{1} << 24;

//! Elements of `size` bytes from p (aligned to size) to the next 64-byte boundary, where
//! whole-line streaming stores can start.
inline std::uint64_t elements_to_line(const void* p, std::size_t size) {
  const auto addr = reinterpret_cast<std::uintptr_t>(p);
  return (64 - addr % 64) % 64 / size;
}

// ---- Loads and stores of a dtype fixed at compile time -------------------------------
//! Prefetches element i of a tensor of dtype t; Locality as in __builtin_prefetch (1: into
//! L2, 3: into L1). Integer arithmetic: the address may lie past the end (a prefetch never
//! faults).
template <int Locality>
GRADCODEC_VINLINE void prefetch_element(const void* base, dtype t, std::uint64_t i) {
  const std::uintptr_t at = reinterpret_cast<std::uintptr_t>(base) + i * dtype_size(t);
  __builtin_prefetch(reinterpret_cast<const void*>(at), 0, Locality);
}

// The same values as vload_any / vstore_any, without the run-time switch: small enough to
// be inlined into hot loops (GCC does not inline the switching versions there).

template <dtype T>
GRADCODEC_VINLINE vf16 vload_typed(const void* base, std::uint64_t i) {
  if constexpr (T == dtype::f32)
    return vload(static_cast<const float*>(base) + i);
  else if constexpr (T == dtype::f16)
    return vload_f16(static_cast<const std::uint16_t*>(base) + i);
  else
    return vload_bf16(static_cast<const std::uint16_t*>(base) + i);
}
template <dtype T>
GRADCODEC_VINLINE vf16 vload_typed_n(const void* base, std::uint64_t i, unsigned n) {
  if constexpr (T == dtype::f32)
    return vload_n(static_cast<const float*>(base) + i, n);
  else
    return vload_any_n(base, T, i, n);
}
template <dtype T>
GRADCODEC_VINLINE void vstore_typed(void* base, std::uint64_t i, vf16 a) {
  if constexpr (T == dtype::f32)
    vstore(static_cast<float*>(base) + i, a);
  else if constexpr (T == dtype::f16)
    vstore_f16(static_cast<std::uint16_t*>(base) + i, a);
  else
    vstore_bf16(static_cast<std::uint16_t*>(base) + i, a);
}
template <dtype T>
GRADCODEC_VINLINE void vstore_typed_n(void* base, std::uint64_t i, vf16 a, unsigned n) {
  if constexpr (T == dtype::f32)
    vstore_n(static_cast<float*>(base) + i, a, n);
  else
    vstore_any_n(base, T, i, a, n);
}
//! fn.template operator()<T>() for the run-time dtype t.
template <class Fn>
GRADCODEC_VINLINE void with_dtype(dtype t, Fn&& fn) {
  switch (t) {
    case dtype::f32: fn.template operator()<dtype::f32>(); break;
    case dtype::f16: fn.template operator()<dtype::f16>(); break;
    case dtype::bf16: fn.template operator()<dtype::bf16>(); break;
  }
}
