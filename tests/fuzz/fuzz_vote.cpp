// SPDX-License-Identifier: Apache-2.0
// Fuzzes sign_majority_vote: up to six frame descriptions, each either raw bytes or a sign
// frame encoded from fuzzed values and then patched byte by byte, voted (optionally
// repeated to 256-271 voters, the vote's wide-counter path) into a poisoned output
// with guard zones. Promises checked: no crash or sanitizer report, nothing written outside
// the output, nothing written at all on error, and the status and every value equal those
// of a slow per-element oracle written here from docs/codecs.md "Majority vote".
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "fuzz_common.hpp"
#include "gradcodec/blocks/fmath.hpp"
#include "gradcodec/blocks/layout.hpp"
#include "gradcodec/vote.hpp"
#include "support/data.hpp"

namespace gc = gradcodec;

namespace {

//! Reads the fuzzer's bytes front to back; zeros once they run out.
struct reader {
  const std::uint8_t* p;
  std::size_t left;
  std::uint8_t byte() {
    if (left == 0) return 0;
    --left;
    return *p++;
  }
  std::uint16_t u16() { return static_cast<std::uint16_t>(byte() | (byte() << 8)); }
  std::uint32_t u32() { return u16() | (static_cast<std::uint32_t>(u16()) << 16); }
};

//! A gradient value from one byte: mostly small integers of both signs (and both zeros),
//! now and then NaN or an infinity, so that encode marks the bucket.
float value_of(std::uint8_t b) {
  switch (b) {
    case 0x7F: return std::numeric_limits<float>::infinity();
    case 0x80: return std::numeric_limits<float>::quiet_NaN();
    case 0x81: return -0.0f;
    default: return static_cast<float>(static_cast<std::int8_t>(b));
  }
}

//! A sign frame encoded by the library from fuzzed values, then patched.
std::vector<std::byte> synth_frame(reader& r, std::uint64_t n, std::uint32_t bucket) {
  static constexpr const char* scales[] = {"none", "mean", "l2"};
  const std::string spec =
      "sign:bucket=" + std::to_string(bucket) + ",scale=" + scales[r.byte() % 3];
  const auto in_type = static_cast<gc::dtype>(r.byte() % 3);
  std::vector<float> values(n);
  for (float& v : values) v = value_of(r.byte());
  const gc::test::tensor in(values, in_type);
  const auto codec = gc::parse_spec(spec).value();
  const gc::const_tensor_view x = in.cview();
  std::vector<std::byte> frame(gc::encode_bound(codec, n, in_type, 0));
  std::vector<std::byte> ws;
  const auto opt = gc::fuzz::with_workspace(
      gc::backend::reference, ws,
      gc::workspace_size(codec, x, gc::operation::encode, {gc::backend::reference}).value());
  auto w = gc::encode(codec, gc::context{1, 2, 3}, x, frame, opt);
  GRADCODEC_FUZZ_CHECK(w.ok());
  frame.resize(w.value());
  // Patches: xor a byte anywhere (header bytes break the CRC; payload bytes change codes
  // and scales), or cut the frame short.
  for (unsigned k = r.byte() % 8; k > 0 && !frame.empty(); --k) {
    const std::uint16_t at = r.u16();
    const std::uint8_t x_or = r.byte();
    if (x_or == 0)
      frame.resize(at % frame.size());
    else
      frame[at % frame.size()] ^= static_cast<std::byte>(x_or);
  }
  return frame;
}

float scale_at(gc::const_bytes frame, const gc::blocks::bucket_layout& l, std::uint64_t b) {
  float s;
  std::memcpy(&s, frame.data() + gc::header_bytes + l.scales_offset + 4 * b, 4);
  return s;
}

//! The vote as docs/codecs.md writes it, one element at a time. Returns false where the
//! vote must fail, and then leaves out as it was.
bool oracle(const std::vector<gc::const_bytes>& frames, std::uint64_t out_n, float alpha,
            gc::test::tensor& out) {
  if (frames.empty()) return false;
  std::uint64_t n = 0;
  std::uint32_t bucket = 0;
  for (std::size_t f = 0; f < frames.size(); ++f) {
    auto h = gc::peek(frames[f]);
    if (!h.ok() || h.value().codec != gc::codec_id::sign ||
        frames[f].size() != h.value().frame_bytes())
      return false;
    if (f == 0) {
      n = h.value().n;
      bucket = h.value().group;
    } else if (h.value().n != n || h.value().group != bucket) {
      return false;
    }
  }
  if (out_n != n) return false;
  const auto l = gc::blocks::bucket_layout_of(n, bucket, 1, 1);
  for (std::uint64_t i = 0; i < n; ++i) {
    bool poisoned = false;
    long long c = 0;
    for (const auto& frame : frames) {
      poisoned = poisoned || std::isnan(scale_at(frame, l, i / bucket));
      const auto code = static_cast<std::uint8_t>(frame[gc::header_bytes + l.codes_offset + i / 8]);
      c += (code >> (i % 8)) & 1u ? -1 : 1;
    }
    const float sigma = c > 0 ? 1.0f : c < 0 ? -1.0f : 0.0f;
    // A NaN product (NaN alpha, or an infinite one at a tie) is the canonical NaN too.
    float v = alpha * sigma;
    if (poisoned || std::isnan(v)) v = gc::blocks::canonical_nan();
    out.set(i, v);
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  reader r{data, size};
  const std::uint8_t flags = r.byte();
  const auto type = static_cast<gc::dtype>((flags & 3u) % 3);
  const bool wrong_length = (flags & 4u) != 0;
  const bool many_voters = (flags & 8u) != 0;
  float alpha;
  const std::uint32_t alpha_bits = r.u32();
  std::memcpy(&alpha, &alpha_bits, 4);

  // The shape every synthesized frame shares, unless its description asks for its own.
  const std::uint64_t shared_n = r.u16() % 3000;
  static constexpr std::array<std::uint32_t, 8> buckets = {1, 7, 8, 55, 56, 57, 64, 2048};
  const std::uint32_t shared_bucket = buckets[r.byte() % buckets.size()];

  std::vector<std::vector<std::byte>> owned;
  for (unsigned f = 1 + r.byte() % 6; f > 0 && r.left > 0; --f) {
    const std::uint8_t kind = r.byte();
    if (kind % 4 == 0) {  // raw bytes
      const std::size_t len = std::min<std::size_t>(r.u16(), r.left);
      owned.emplace_back(reinterpret_cast<const std::byte*>(r.p),
                         reinterpret_cast<const std::byte*>(r.p) + len);
      r.p += len;
      r.left -= len;
    } else if (kind % 4 == 1) {  // a shape of its own
      const std::uint64_t n = r.u16() % 3000;
      owned.push_back(synth_frame(r, n, 1 + r.byte()));
    } else {
      owned.push_back(synth_frame(r, shared_n, shared_bucket));
    }
  }
  // Many voters: the frames again and again, to 256 and more (u32 counters).
  std::vector<gc::const_bytes> frames;
  const std::size_t votes = many_voters && !owned.empty() ? 256 + flags / 16 : owned.size();
  for (std::size_t k = 0; k < votes; ++k) frames.emplace_back(owned[k % owned.size()]);

  auto h = frames.empty() ? gc::peek({}) : gc::peek(frames[0]);
  const std::uint64_t frame_n = h.ok() ? h.value().n : 64;
  if (frame_n > (1u << 16)) return 0;
  const std::uint64_t n = wrong_length ? frame_n + 1 : frame_n;
  // The output between guard zones; the oracle's tensor starts as the output's poison.
  constexpr std::size_t guard = 16;
  std::vector<std::byte> out(n * gc::dtype_size(type) + 2 * guard, std::byte{0xA5});
  gc::test::tensor expect = gc::test::tensor::zeros(n, type);
  std::fill(expect.bytes.begin(), expect.bytes.end(), std::byte{0xA5});

  const gc::status st = gc::sign_majority_vote(frames, {out.data() + guard, n, type, 0}, alpha);
  const bool ok = oracle(frames, n, alpha, expect);
  GRADCODEC_FUZZ_CHECK(st.ok() == ok);
  GRADCODEC_FUZZ_CHECK(ok || st.message()[0] != '\0');
  // On error nothing is written; on success exactly the oracle's bytes; guards untouched.
  for (std::size_t i = 0; i < out.size(); ++i) {
    const bool in_guard = i < guard || i >= guard + expect.bytes.size();
    GRADCODEC_FUZZ_CHECK(out[i] == (in_guard ? std::byte{0xA5} : expect.bytes[i - guard]));
  }
  return 0;
}
