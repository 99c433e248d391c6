// SPDX-License-Identifier: Apache-2.0
//! @file
//! The SIMD layer's operations for the scalar level (GRADCODEC_CPU_LEVEL 0): sixteen lanes in
//! arrays, one loop each. Included by cpu/simd-inl.hpp only, inside the variant's ISA namespace.

// ---- Types, memory, arithmetic, conversions ---------------------------------------------
struct vf16 {
  float v[16];
};
struct vu16 {
  std::uint32_t v[16];
};

#define GRADCODEC_LANES for (int j = 0; j < 16; ++j)
// Memory goes through memcpy: kernels may hand in f32 pointers into a byte buffer (a payload
// after its header) that are not 4-byte aligned, which the SIMD levels' unaligned loads
// accept and a plain scalar access would make undefined.
GRADCODEC_VINLINE vf16 vload(const float* p) {
  vf16 r;
  std::memcpy(r.v, p, sizeof r.v);
  return r;
}
GRADCODEC_VINLINE vf16 vload_n(const float* p, unsigned n) {
  vf16 r{};
  std::memcpy(r.v, p, n * sizeof(float));
  return r;
}
GRADCODEC_VINLINE void vstore(float* p, vf16 a) { std::memcpy(p, a.v, sizeof a.v); }
GRADCODEC_VINLINE void vstore_n(float* p, vf16 a, unsigned n) {
  std::memcpy(p, a.v, n * sizeof(float));
}
GRADCODEC_VINLINE vu16 vload_u(const std::uint32_t* p) {
  vu16 r;
  std::memcpy(r.v, p, sizeof r.v);
  return r;
}
GRADCODEC_VINLINE void vstore_u(std::uint32_t* p, vu16 a) { std::memcpy(p, a.v, sizeof a.v); }
GRADCODEC_VINLINE vf16 vset1(float x) {
  vf16 r;
  GRADCODEC_LANES r.v[j] = x;
  return r;
}
GRADCODEC_VINLINE vu16 vset1u(std::uint32_t x) {
  vu16 r;
  GRADCODEC_LANES r.v[j] = x;
  return r;
}
GRADCODEC_VINLINE vf16 vzero() { return vset1(0.0f); }
#define GRADCODEC_S2(T, name, expr)  \
  inline T name(T a, T b) {          \
    T r;                             \
    GRADCODEC_LANES r.v[j] = (expr); \
    return r;                        \
  }
GRADCODEC_S2(vf16, operator+, a.v[j] + b.v[j])
GRADCODEC_S2(vf16, operator-, a.v[j] - b.v[j])
GRADCODEC_S2(vf16, operator*, a.v[j] * b.v[j])
GRADCODEC_S2(vf16, operator/, a.v[j] / b.v[j])
// Same as x86 minps/maxps: the second operand when equal or unordered.
GRADCODEC_S2(vf16, vmin, a.v[j] < b.v[j] ? a.v[j] : b.v[j])
GRADCODEC_S2(vf16, vmax, a.v[j] > b.v[j] ? a.v[j] : b.v[j])
GRADCODEC_S2(vu16, operator+, a.v[j] + b.v[j])
GRADCODEC_S2(vu16, operator-, a.v[j] - b.v[j])
GRADCODEC_S2(vu16, operator&, a.v[j] & b.v[j])
GRADCODEC_S2(vu16, operator|, a.v[j] | b.v[j])
GRADCODEC_S2(vu16, operator^, a.v[j] ^ b.v[j])
GRADCODEC_S2(vu16, vminu, a.v[j] < b.v[j] ? a.v[j] : b.v[j])
#undef GRADCODEC_S2
GRADCODEC_VINLINE vf16 vsqrt(vf16 a) {
  vf16 r;
  GRADCODEC_LANES r.v[j] = std::sqrt(a.v[j]);
  return r;
}
GRADCODEC_VINLINE vf16 vfma(vf16 a, vf16 b, vf16 c) {
  vf16 r;
  GRADCODEC_LANES r.v[j] = std::fma(a.v[j], b.v[j], c.v[j]);
  return r;
}
GRADCODEC_VINLINE vf16 vfloor(vf16 a) {
  vf16 r;
  GRADCODEC_LANES r.v[j] = std::floor(a.v[j]);
  return r;
}
GRADCODEC_VINLINE vu16 vbits(vf16 a) {
  vu16 r;
  std::memcpy(r.v, a.v, 64);
  return r;
}
GRADCODEC_VINLINE vf16 vfrombits(vu16 a) {
  vf16 r;
  std::memcpy(r.v, a.v, 64);
  return r;
}
#define GRADCODEC_SM(T, name, expr)             \
  GRADCODEC_VINLINE mask16 name(T a, T b) {     \
    unsigned m = 0;                             \
    GRADCODEC_LANES m |= (expr) ? 1u << j : 0u; \
    return static_cast<mask16>(m);              \
  }
GRADCODEC_SM(vf16, vlt, a.v[j] < b.v[j])
GRADCODEC_SM(vf16, vle, a.v[j] <= b.v[j])
GRADCODEC_SM(vf16, veq, a.v[j] == b.v[j])
GRADCODEC_SM(vu16, vltu, a.v[j] < b.v[j])
GRADCODEC_SM(vu16, vequ, a.v[j] == b.v[j])
#undef GRADCODEC_SM
GRADCODEC_VINLINE vf16 vselect(mask16 m, vf16 a, vf16 b) {
  vf16 r;
  GRADCODEC_LANES r.v[j] = (m >> j) & 1u ? a.v[j] : b.v[j];
  return r;
}
GRADCODEC_VINLINE vu16 vselectu(mask16 m, vu16 a, vu16 b) {
  vu16 r;
  GRADCODEC_LANES r.v[j] = (m >> j) & 1u ? a.v[j] : b.v[j];
  return r;
}
//! x where a < b (unsigned), y elsewhere.
GRADCODEC_VINLINE vu16 vselect_ltu(vu16 a, vu16 b, vu16 x, vu16 y) {
  return vselectu(vltu(a, b), x, y);
}
//! x where a < b as signed 32-bit integers, y elsewhere: vselect_ltu's values where both are
//! below 2^31, in one compare on AVX2 (which has no unsigned one).
GRADCODEC_VINLINE vu16 vselect_lts(vu16 a, vu16 b, vu16 x, vu16 y) {
  vu16 r;
  GRADCODEC_LANES r.v[j] =
      static_cast<std::int32_t>(a.v[j]) < static_cast<std::int32_t>(b.v[j]) ? x.v[j] : y.v[j];
  return r;
}
//! The sign bit of lane j set where bit j of bits is, every other bit clear.
GRADCODEC_VINLINE vu16 vsign_bits(std::uint32_t bits) {
  vu16 r;
  GRADCODEC_LANES r.v[j] = ((bits >> j) & 1u) << 31;
  return r;
}
//! The Bits-bit sign-magnitude codes of magnitudes mag (below 2^(Bits - 1)) and the signs of
//! s: bit Bits - 1 set where s is negative and mag is not 0 (a zero code stays +0).
template <unsigned Bits>
GRADCODEC_VINLINE vu16 vsign_magnitude(vu16 mag, vu16 s) {
  vu16 r;
  GRADCODEC_LANES r.v[j] =
      mag.v[j] | (mag.v[j] != 0 && (s.v[j] >> 31) != 0 ? 1u << (Bits - 1) : 0u);
  return r;
}
GRADCODEC_VINLINE vu16 vshl(vu16 a, unsigned s) {
  vu16 r;
  GRADCODEC_LANES r.v[j] = a.v[j] << s;
  return r;
}
GRADCODEC_VINLINE vu16 vshr(vu16 a, unsigned s) {
  vu16 r;
  GRADCODEC_LANES r.v[j] = a.v[j] >> s;
  return r;
}
GRADCODEC_VINLINE vu16 vtrunc_u(vf16 a) {
  vu16 r;
  GRADCODEC_LANES r.v[j] = static_cast<std::uint32_t>(a.v[j]);
  return r;
}
GRADCODEC_VINLINE vf16 vto_f(vu16 a) {
  vf16 r;
  GRADCODEC_LANES r.v[j] = static_cast<float>(a.v[j]);
  return r;
}
GRADCODEC_VINLINE float vfold(vf16 a) {
  for (int h = 8; h >= 1; h /= 2)
    for (int j = 0; j < h; ++j) a.v[j] = a.v[j] + a.v[j + h];
  return a.v[0];
}
GRADCODEC_VINLINE vu16 vload_u16(const std::uint16_t* p) {
  std::uint16_t h[16];
  std::memcpy(h, p, sizeof h);
  vu16 r;
  GRADCODEC_LANES r.v[j] = h[j];
  return r;
}
GRADCODEC_VINLINE void vstore_u16(std::uint16_t* p, vu16 a) {
  std::uint16_t h[16];
  GRADCODEC_LANES h[j] = static_cast<std::uint16_t>(a.v[j]);
  std::memcpy(p, h, sizeof h);
}
//! The binary16 in each lane's low 16 bits as f32 (exact; a subnormal stays one under DAZ).
GRADCODEC_VINLINE vf16 vhalf_to_f(vu16 h) {
  vf16 r;
  GRADCODEC_LANES r.v[j] = blocks::f16_to_f32(static_cast<std::uint16_t>(h.v[j]));
  return r;
}
GRADCODEC_VINLINE vf16 vload_f16(const std::uint16_t* p) { return vhalf_to_f(vload_u16(p)); }
GRADCODEC_VINLINE void vstore_f16(std::uint16_t* p, vf16 a) {
  vu16 h;
  GRADCODEC_LANES h.v[j] = blocks::f32_to_f16(a.v[j]);
  vstore_u16(p, h);
}

// ---- Sixteen 16-bit lanes: a byte code's binary16 bits ---------------------------------
//! 16 x u16: where byte codes become binary16 bits, at half the width of widening each
//! code to 32 bits first (fp8 decodes).
struct vh16 {
  std::uint16_t v[16];
};
//! The 16 bytes at p, each sign-extended to 16 bits.
GRADCODEC_VINLINE vh16 vload_i8_h(const std::uint8_t* p) {
  vh16 r;
  GRADCODEC_LANES r.v[j] = static_cast<std::uint16_t>(static_cast<std::int8_t>(p[j]));
  return r;
}
GRADCODEC_VINLINE vh16 vset1h(std::uint16_t x) {
  vh16 r;
  GRADCODEC_LANES r.v[j] = x;
  return r;
}
GRADCODEC_VINLINE vh16 operator&(vh16 a, vh16 b) {
  GRADCODEC_LANES a.v[j] &= b.v[j];
  return a;
}
GRADCODEC_VINLINE vh16 operator|(vh16 a, vh16 b) {
  GRADCODEC_LANES a.v[j] |= b.v[j];
  return a;
}
GRADCODEC_VINLINE vh16 vshl(vh16 a, unsigned s) {
  GRADCODEC_LANES a.v[j] = static_cast<std::uint16_t>(a.v[j] << s);
  return a;
}
//! x where a == b, y elsewhere.
GRADCODEC_VINLINE vh16 vselect_eqh(vh16 a, vh16 b, vh16 x, vh16 y) {
  GRADCODEC_LANES y.v[j] = a.v[j] == b.v[j] ? x.v[j] : y.v[j];
  return y;
}
//! Each lane's binary16 as f32 (exact; a subnormal stays one under DAZ).
GRADCODEC_VINLINE vf16 vhalf_to_f(vh16 h) {
  vf16 r;
  GRADCODEC_LANES r.v[j] = blocks::f16_to_f32(h.v[j]);
  return r;
}
#undef GRADCODEC_LANES

// ---- NaN-aware select and add -----------------------------------------------------------
//! if_nan in the lanes where a is NaN, otherwise elsewhere: a float compare, so AVX2 needs no
//! mask16 round trip (that made bf16 stores slower than scalar code).
GRADCODEC_VINLINE vu16 vselect_nan(vf16 a, vu16 if_nan, vu16 otherwise) {
  vu16 r;
  for (int j = 0; j < 16; ++j) r.v[j] = a.v[j] != a.v[j] ? if_nan.v[j] : otherwise.v[j];
  return r;
}

//! a + b lane-wise, with blocks::fadd_nan_first's NaN: a NaN a, quieted, even when b is a NaN
//! too. An x86 add returns its first source's NaN when both are NaN, but a compiler may swap
//! the operands of a commutative add (GCC 12 did, in some error-feedback loops), so the
//! order is pinned with one vaddps in inline assembly.
GRADCODEC_VINLINE vf16 vadd_nan_first(vf16 a, vf16 b) {
  vf16 r;
  for (int j = 0; j < 16; ++j) r.v[j] = blocks::fadd_nan_first(a.v[j], b.v[j]);
  return r;
}

// ---- Lane-valued compare and unsigned max (quantizers, block scales) -----------------
// vlt_bits gives a < b as a lane value (all ones / zero) instead of a mask16, so kernels can
// add or mask with it directly: on AVX2 that avoids the mask16 round trip (movemask, then
// re-expansion in vselect).
GRADCODEC_VINLINE vu16 vlt_bits(vf16 a, vf16 b) {
  vu16 r;
  for (int j = 0; j < 16; ++j) r.v[j] = a.v[j] < b.v[j] ? 0xFFFFFFFFu : 0u;
  return r;
}
GRADCODEC_VINLINE vu16 vmaxu(vu16 a, vu16 b) {
  vu16 r;
  for (int j = 0; j < 16; ++j) r.v[j] = a.v[j] > b.v[j] ? a.v[j] : b.v[j];
  return r;
}
GRADCODEC_VINLINE std::uint32_t vhmaxu(vu16 a) {
  std::uint32_t m = 0;
  for (int j = 0; j < 16; ++j) m = a.v[j] > m ? a.v[j] : m;
  return m;
}

// ---- Lane exchange (Hadamard butterflies) ---------------------------------------------
//! Lane j of the result is lane j ^ H of a (H = 1, 2, 4, 8).
template <unsigned H>
GRADCODEC_VINLINE vf16 vswap_lanes(vf16 a) {
  vf16 r;
  for (unsigned j = 0; j < 16; ++j) r.v[j] = a.v[j ^ H];
  return r;
}

// ---- Sixteen-entry table lookup (4-bit codes) ------------------------------------------
//! Lane j of the result is table[idx[j]] (idx < 16; table: 16 floats).
GRADCODEC_VINLINE vf16 vlookup16(const float* table, vu16 idx) {
  vf16 r;
  for (int j = 0; j < 16; ++j) r.v[j] = table[idx.v[j]];
  return r;
}

// ---- Signed compare and ordered compaction (sparse selection) ---------------------------
GRADCODEC_VINLINE mask16 vgti(vu16 a, vu16 b) {
  unsigned m = 0;
  for (int j = 0; j < 16; ++j)
    m |= static_cast<std::int32_t>(a.v[j]) > static_cast<std::int32_t>(b.v[j]) ? 1u << j : 0u;
  return static_cast<mask16>(m);
}
GRADCODEC_VINLINE unsigned vcompress_store(std::uint32_t* p, mask16 m, vu16 a) {
  unsigned c = 0;
  for (int j = 0; j < 16; ++j)
    if ((m >> j) & 1u) p[c++] = a.v[j];
  return c;
}

// ---- Streaming stores -------------------------------------------------------------------
GRADCODEC_VINLINE void vstream(float* p, vf16 a) { vstore(p, a); }
GRADCODEC_VINLINE void vstream_fence() {}

// ---- Select by lane-valued mask -----------------------------------------------------
// vselect_bits(m, a, b): a where lane m is all ones, b where it is zero (the lanes vlt_bits
// gives; other values are not allowed). Unlike vselect it keeps the mask in a vector
// register: on AVX2 a mask16 built by vlt and expanded again by vselect goes through a
// general register (and, with a 16-bit spill, a store-forwarding stall).
GRADCODEC_VINLINE vf16 vselect_bits(vu16 m, vf16 a, vf16 b) {
  vf16 r;
  for (int j = 0; j < 16; ++j) r.v[j] = m.v[j] != 0 ? a.v[j] : b.v[j];
  return r;
}
