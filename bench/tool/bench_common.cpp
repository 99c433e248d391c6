// SPDX-License-Identifier: Apache-2.0
//! @file
//! Helpers shared by the benchmarks of `gradcodec bench`.
#include "bench_common.hpp"

#include <algorithm>
#include <cmath>

#include "args.hpp"
#include "error.hpp"
#include "text.hpp"

namespace gradcodec::tool {

std::vector<std::string> split_list(const std::string& what, const std::string& text) {
  std::vector<std::string> out;
  std::size_t start = 0;
  for (;;) {
    const auto comma = text.find(',', start);
    out.push_back(
        text.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    if (out.back().empty()) usage_fail(what + ": empty entry in '" + text + "'");
    if (comma == std::string::npos) return out;
    start = comma + 1;
  }
}

std::vector<std::string> split_codecs(const std::vector<std::string>& values) {
  std::vector<std::string> out;
  for (const auto& v : values)
    for (const auto& piece : split_list("--codecs", v)) {
      const bool continues =
          piece.find('=') != std::string::npos && piece.find(':') == std::string::npos;
      if (!continues) {
        out.push_back(piece);
        continue;
      }
      if (out.empty() || out.back() == "all")
        usage_fail("--codecs: '" + piece + "' does not follow a codec name");
      out.back() += (out.back().find(':') == std::string::npos ? ":" : ",") + piece;
    }
  return out;
}

std::uint64_t parse_size(const std::string& text, const std::string& what) {
  if (text.rfind("2^", 0) == 0) {
    const std::uint64_t k = parse_u64(what, text.substr(2));
    if (k > 32) usage_fail(what + ": '" + text + "' is above 2^32");
    return std::uint64_t{1} << k;
  }
  const std::uint64_t n = parse_u64(what, text);
  // The top-k baselines keep 32-bit indices.
  if (n == 0 || n > (std::uint64_t{1} << 32))
    usage_fail(what + ": '" + text + "' must be in 1..2^32");
  return n;
}

std::string size_name(std::uint64_t n) {
  if (n >= 1024 && (n & (n - 1)) == 0) {
    int k = 0;
    while ((std::uint64_t{1} << k) != n) ++k;
    return "2^" + std::to_string(k);
  }
  return std::to_string(n);
}

double median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const std::size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : 0.5 * (v[m - 1] + v[m]);
}

std::string json_string(const std::string& s) {
  std::string o = "\"";
  for (const char c : s) {
    if (c == '"' || c == '\\') {
      o += '\\';
      o += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      o += strprintf("\\u%04x", static_cast<unsigned>(c));
    } else {
      o += c;
    }
  }
  return o + "\"";
}

std::string json_number(double v) { return std::isfinite(v) ? strprintf("%.9g", v) : "null"; }

void fill_gradient(std::span<float> x, std::uint64_t stream) {
  std::uint64_t s = 0x9e3779b97f4a7c15ull ^ stream * 0xd1b54a32d192ed03ull;
  const auto next = [&s] {
    s += 0x9e3779b97f4a7c15ull;
    std::uint64_t z = s;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  };
  for (std::size_t i = 0; i < x.size(); ++i) {
    const std::uint64_t r = next();
    float u = -2.0f;
    for (int j = 0; j < 4; ++j) u += static_cast<float>((r >> (16 * j)) & 0xffff) * 0x1p-16f;
    x[i] = u * ((i % 64 == 7) ? 1e-2f : 1e-3f);
  }
}

}  // namespace gradcodec::tool
