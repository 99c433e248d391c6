// SPDX-License-Identifier: Apache-2.0
//! @file
//! Helpers of the tests that hold the CPU backend against the reference: the ISA variants
//! this machine runs, encode / decode / error-feedback runs on one backend with a thread
//! count (and optionally misaligned buffers), and byte comparisons that name the first
//! difference.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <initializer_list>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "data.hpp"
#include "gradcodec/cpu.hpp"

namespace gradcodec::test {

// ---- ISA variants ------------------------------------------------------------------------

//! The ISA variants this machine runs, scalar first.
inline std::vector<cpu_isa> supported_isas() {
  std::vector<cpu_isa> out;
  for (auto isa : {cpu_isa::scalar, cpu_isa::avx2, cpu_isa::avx512})
    if (cpu_isa_supported(isa)) out.push_back(isa);
  return out;
}

//! Makes the best ISA active again when it leaves scope.
struct isa_guard {
  isa_guard() = default;
  isa_guard(const isa_guard&) = delete;
  isa_guard& operator=(const isa_guard&) = delete;
  ~isa_guard() { (void)set_cpu_isa(cpu_isa_best()); }
};

//! Runs fn once per supported ISA with that ISA active, then makes the best one active.
template <class Fn>
void for_each_isa(Fn fn) {
  for (auto isa : supported_isas()) {
    ASSERT_TRUE(set_cpu_isa(isa).ok());
    SCOPED_TRACE(std::string(cpu_isa_name(isa)));
    fn();
  }
  ASSERT_TRUE(set_cpu_isa(cpu_isa_best()).ok());
}

// ---- Buffers -----------------------------------------------------------------------------

//! A 64-bit LCG for test data.
struct lcg {
  std::uint64_t s;
  std::uint32_t next() {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<std::uint32_t>(s >> 32);
  }
};

//! n Gaussian values (gaussian(n, seed)) overwritten in runs of 1 to max_run elements, each
//! of a kind drawn with lcg{seed}, so that they stress the formulas: 0: scaled by 2^e, e
//! from -150 to 129; 1: +-0.0; 3: +-FLT_MAX; 6: 2^(e/2); 7-9: left as they are. Kinds 2, 4
//! and 5 are the caller's: custom(kind, value, rng) gives the element's new value.
template <class Custom>
std::vector<float> adversarial_runs(std::size_t n, std::uint64_t seed, std::uint32_t max_run,
                                    Custom custom) {
  auto v = gaussian(n, seed);
  lcg r{seed};
  std::size_t i = 0;
  while (i < n) {
    const std::size_t run = 1 + r.next() % max_run;
    const unsigned kind = r.next() % 10;
    const int e = static_cast<int>(r.next() % 280) - 150;
    for (std::size_t k = i; k < std::min(n, i + run); ++k) {
      switch (kind) {
        case 0: v[k] = std::ldexp(v[k], e); break;
        case 1: v[k] = (r.next() & 1) ? 0.0f : -0.0f; break;
        case 3: v[k] = (r.next() & 1) ? FLT_MAX : -FLT_MAX; break;
        case 6: v[k] = std::ldexp(1.0f, e / 2); break;
        case 2:
        case 4:
        case 5: v[k] = custom(kind, v[k], r); break;
        default: break;
      }
    }
    i += run;
  }
  return v;
}

//! A copy of t whose data starts `offset` bytes after a 64-byte boundary.
struct shifted {
  std::vector<std::byte> storage;
  tensor_view v;
  shifted(const tensor& t, std::size_t offset) : storage(t.bytes.size() + 128) {
    auto base = reinterpret_cast<std::uintptr_t>(storage.data());
    auto* p = storage.data() + ((64 - base % 64) % 64) + offset;
    if (!t.bytes.empty())
      std::memcpy(p, t.bytes.data(), t.bytes.size());  // n = 0: data() may be null
    v = {p, t.n, t.type, t.rows};
  }
  std::vector<std::byte> bytes() const {
    auto* p = static_cast<const std::byte*>(v.data);
    return {p, p + v.n * dtype_size(v.type)};
  }
};

//! Empty when equal, else the first differing element (of `width` bytes) and both values.
inline std::string first_difference(const std::vector<std::byte>& got,
                                    const std::vector<std::byte>& want, std::size_t width) {
  if (got == want) return {};
  if (got.size() != want.size())
    return "sizes " + std::to_string(got.size()) + " vs " + std::to_string(want.size());
  for (std::size_t i = 0; i < got.size(); i += width)
    if (std::memcmp(got.data() + i, want.data() + i, width) != 0) {
      std::uint32_t a = 0, b = 0;
      std::memcpy(&a, got.data() + i, width);
      std::memcpy(&b, want.data() + i, width);
      char buf[96];
      std::snprintf(buf, sizeof buf, "element %zu: 0x%08x vs 0x%08x", i / width, a, b);
      return buf;
    }
  return {};
}

//! Overwrites the payload of frame with LCG bytes, then puts the `special` 32-bit patterns
//! (in a shuffled order) at its start, where the first buckets' scales are.
inline void scramble_payload(std::vector<std::byte>& frame,
                             std::span<const std::uint32_t> special) {
  lcg r{11};
  for (std::size_t k = header_bytes; k < frame.size(); ++k)
    frame[k] = static_cast<std::byte>(r.next());
  for (std::size_t k = 0; k < special.size(); ++k)
    std::memcpy(frame.data() + header_bytes + 4 * k, &special[(k * 5) % special.size()], 4);
}

// ---- One run on one backend --------------------------------------------------------------

inline exec_options options(backend where, int threads) {
  exec_options opt{where};
  opt.threads = threads;
  return opt;
}

namespace detail {

//! Runs call(out, opt), an encode into `out`, with a workspace sized for op on `in` and an
//! output buffer that starts `shift` bytes past its allocation (odd shifts: unaligned
//! payloads). The frame written; empty (and a failure) when the call fails.
template <class Call>
std::vector<std::byte> encode_run(const codec_spec& spec, const_tensor_view in, operation op,
                                  backend where, int threads, std::size_t shift, Call call) {
  exec_options opt = options(where, threads);
  std::vector<std::byte> ws(workspace_size(spec, in, op, opt).value());
  opt.workspace = ws;
  std::vector<std::byte> buf(encode_bound(spec, in.n, in.type, in.rows) + shift);
  const result<std::size_t> w = call(mutable_bytes{buf.data() + shift, buf.size() - shift}, opt);
  EXPECT_TRUE(w.ok()) << w.error().message();
  if (!w.ok()) return {};
  return {buf.begin() + static_cast<std::ptrdiff_t>(shift),
          buf.begin() + static_cast<std::ptrdiff_t>(shift + w.value())};
}

}  // namespace detail

//! The frame of `in` encoded on `where` with `threads`, written `shift` bytes past an
//! allocation.
inline std::vector<std::byte> encode_on(const codec_spec& spec, const context& ctx,
                                        const_tensor_view in, backend where, int threads = 1,
                                        std::size_t shift = 0) {
  return detail::encode_run(
      spec, in, operation::encode, where, threads, shift,
      [&](mutable_bytes out, const exec_options& opt) { return encode(spec, ctx, in, out, opt); });
}

//! The frame of one encode_with_feedback of g on `where`; the residual e is updated in place.
inline std::vector<std::byte> encode_feedback_on(const codec_spec& spec, const context& ctx,
                                                 const_tensor_view g, tensor_view e, backend where,
                                                 int threads = 1) {
  return detail::encode_run(spec, g, operation::encode_with_feedback, where, threads, 0,
                            [&](mutable_bytes out, const exec_options& opt) {
                              return encode_with_feedback(spec, ctx, g, e, out, opt);
                            });
}

//! Frame and residual bytes after one encode_with_feedback.
struct feedback_result {
  std::vector<std::byte> frame, residual;
};

//! One fused (cpu) or generic (reference) error-feedback encode of g with the residual e0
//! (left as it is): the frame and the new residual.
inline feedback_result feedback_on(const codec_spec& spec, const context& ctx, const tensor& g,
                                   const tensor& e0, backend where, int threads = 1) {
  tensor e = e0;
  auto frame = encode_feedback_on(spec, ctx, g.cview(), e.mview(), where, threads);
  return {std::move(frame), std::move(e.bytes)};
}

//! Decodes frame into out (accumulate: out += alpha * decoded) on `where` with `threads`
//! and a workspace sized by the library.
inline status decode_into(const_bytes frame, tensor_view out, bool accumulate, float alpha,
                          backend where, int threads = 1) {
  exec_options opt = options(where, threads);
  auto h = peek(frame);
  if (!h) return h.error();
  auto need = workspace_size(spec_of(h.value()), out,
                             accumulate ? operation::decode_accumulate : operation::decode, opt);
  if (!need) return need.error();
  std::vector<std::byte> ws(need.value());
  opt.workspace = ws;
  return accumulate ? decode_accumulate(frame, out, alpha, opt) : decode(frame, out, opt);
}

//! The bytes of a copy of `start` after decoding frame into it (or decode-accumulating,
//! with alpha), the frame read from `shift` bytes past an allocation.
inline std::vector<std::byte> decode_on(const std::vector<std::byte>& frame, const tensor& start,
                                        bool accumulate, float alpha, backend where,
                                        int threads = 1, std::size_t shift = 0) {
  std::vector<std::byte> copy(shift);
  copy.insert(copy.end(), frame.begin(), frame.end());
  tensor out = start;
  const auto st =
      decode_into(const_bytes{copy}.subspan(shift), out.mview(), accumulate, alpha, where, threads);
  EXPECT_TRUE(st.ok()) << st.message();
  return out.bytes;
}

// ---- CPU against the reference -----------------------------------------------------------

//! Empty when decoding frame on the CPU with `threads` gives the reference's values, and so
//! does decode-accumulating it (with alpha) into acc; else the first differences. The
//! decode writes a tensor of acc's length and dtype.
inline std::string cpu_decode_difference(const std::vector<std::byte>& frame, const tensor& acc,
                                         float alpha, int threads) {
  std::string out;
  const tensor zeros = tensor::zeros(acc.n, acc.type, acc.rows);
  const std::size_t width = dtype_size(acc.type);
  for (bool accumulate : {false, true}) {
    const tensor& start = accumulate ? acc : zeros;
    const std::string d =
        first_difference(decode_on(frame, start, accumulate, alpha, backend::cpu, threads),
                         decode_on(frame, start, accumulate, alpha, backend::reference), width);
    if (!d.empty()) out += (accumulate ? "decode_accumulate " : "decode ") + d + "; ";
  }
  return out;
}

//! Encoded bytes on the CPU with `threads` equal the reference's; decoded and
//! decode-accumulated values (alpha, into Gaussian values) of that frame do too, for every
//! output dtype.
inline void expect_cpu_matches_reference(const std::string& spec_text, const context& ctx,
                                         const tensor& x, int threads,
                                         std::initializer_list<dtype> out_types, float alpha) {
  SCOPED_TRACE(spec_text + " n=" + std::to_string(x.n) + " " + std::string(dtype_name(x.type)) +
               " threads=" + std::to_string(threads));
  const auto spec = parse_spec(spec_text).value();
  const auto want = encode_on(spec, ctx, x.cview(), backend::reference);
  const auto got = encode_on(spec, ctx, x.cview(), backend::cpu, threads);
  ASSERT_EQ(first_difference(got, want, 1), "");
  for (auto out_type : out_types) {
    const tensor acc(gaussian(x.n, 77), out_type);
    EXPECT_EQ(cpu_decode_difference(want, acc, alpha, threads), "") << dtype_name(out_type);
  }
}

//! Empty when fused error feedback on the CPU with `threads` gives want's frame and residual
//! bytes, else the first difference.
inline std::string cpu_feedback_difference(const feedback_result& want, const codec_spec& spec,
                                           const context& ctx, const tensor& g, const tensor& e0,
                                           int threads) {
  const auto got = feedback_on(spec, ctx, g, e0, backend::cpu, threads);
  if (auto d = first_difference(got.frame, want.frame, 1); !d.empty()) return "frame " + d;
  if (auto d = first_difference(got.residual, want.residual, dtype_size(e0.type)); !d.empty())
    return "residual " + d;
  return {};
}

//! Fused error feedback of g with the residual e0 on the CPU with 1, 2 and 3 threads gives
//! the frame and residual bytes of the reference's generic composition.
inline void expect_cpu_feedback_matches_reference(const codec_spec& spec, const context& ctx,
                                                  const tensor& g, const tensor& e0) {
  SCOPED_TRACE("n=" + std::to_string(g.n) + " " + std::string(dtype_name(g.type)) + "/" +
               std::string(dtype_name(e0.type)));
  const auto want = feedback_on(spec, ctx, g, e0, backend::reference);
  for (int threads : {1, 2, 3})
    ASSERT_EQ(cpu_feedback_difference(want, spec, ctx, g, e0, threads), "")
        << "threads=" << threads;
}

//! The (gradient, residual) dtype pairs the error-feedback tests run.
inline constexpr std::pair<dtype, dtype> kFeedbackTypes[] = {{dtype::f32, dtype::f32},
                                                             {dtype::f16, dtype::f16},
                                                             {dtype::bf16, dtype::f32},
                                                             {dtype::f32, dtype::bf16}};

//! On every ISA, an encode and an error-feedback encode (of 1001 Gaussian f32 values) with
//! each spec on the CPU into a buffer one byte shorter than the frame are refused with
//! output_too_small, and write neither the buffer (the header included: the codec refuses
//! before the front end writes) nor the residual.
inline void expect_one_byte_short_refused(std::initializer_list<const char*> specs) {
  const tensor x(gaussian(1001, 4), dtype::f32);
  const context ctx{1, 1, 1};
  for_each_isa([&] {
    for (const char* s : specs) {
      SCOPED_TRACE(s);
      const auto spec = parse_spec(s).value();
      const std::size_t need = encode_on(spec, ctx, x.cview(), backend::reference).size();
      guarded buf(need - 1);
      const exec_options opt{backend::cpu};
      auto w = encode(spec, ctx, x.cview(), buf.span(), opt);
      ASSERT_FALSE(w.ok());
      EXPECT_EQ(w.error().code(), status_code::output_too_small);
      EXPECT_TRUE(buf.untouched());
      tensor e = tensor::zeros(x.n, x.type);
      w = encode_with_feedback(spec, ctx, x.cview(), e.mview(), buf.span(), opt);
      ASSERT_FALSE(w.ok());
      EXPECT_TRUE(buf.untouched());
      EXPECT_EQ(e.bytes, tensor::zeros(x.n, x.type).bytes);
    }
  });
}

}  // namespace gradcodec::test
