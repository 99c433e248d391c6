// SPDX-License-Identifier: Apache-2.0
//! @file
//! Spec strings: the table of codecs and parameters, parsing, validation, printing.
#include "gradcodec/spec.hpp"

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <string>

#include "gradcodec/blocks/block_scaled.hpp"

namespace gradcodec {
namespace {

using namespace std::string_view_literals;

constexpr param_info p_k{"k", "0", ">= 0", "absolute count; overrides ratio when > 0"};
constexpr param_info p_nonfinite{"nonfinite", "propagate", "propagate|error",
                                 "keep NaN/Inf visible, or refuse to encode them"};

constexpr std::array topk_params{
    param_info{"ratio", "0.07", "(0, 1]", "kept fraction: k = max(1, floor(ratio*n))"}, p_k,
    p_nonfinite};
constexpr std::array dgc_params{
    param_info{"ratio", "0.07", "(0, 1]", "kept fraction: k = max(1, floor(ratio*n))"}, p_k,
    param_info{"sample", "0.01", "(0, 1]",
               "fraction of elements sampled to estimate the threshold"},
    p_nonfinite};
constexpr std::array randomk_params{
    param_info{"ratio", "0.5", "(0, 1]", "kept fraction: k = max(1, floor(ratio*n))"}, p_k,
    param_info{"unbiased", "0", "0|1", "scale each kept value by its stratum size (unbiased)"},
    p_nonfinite};
constexpr std::array threshold_params{
    param_info{"tau", "0.005", ">= 0", "keep elements with |x| >= tau"},
    param_info{"cap", "0", ">= 0", "keep at most cap elements (the largest); 0 = no cap"},
    p_nonfinite};
constexpr std::array qsgd_params{
    param_info{"levels", "7", "1..127", "s levels per sign; ceil(log2(2s+1)) bits per element"},
    param_info{"bucket", "512", "1..16777216", "elements per norm"},
    param_info{"norm", "max", "l2|max", "bucket norm"},
    param_info{"rounding", "stochastic", "nearest|stochastic", "level rounding"}, p_nonfinite};
constexpr std::array terngrad_params{
    param_info{"bucket", "512", "1..16777216", "elements per scale (max |x|)"},
    param_info{"clip", "2.5", ">= 0", "clip at clip*sigma of the bucket before scaling; 0 = off"},
    p_nonfinite};
constexpr std::array minmax_params{
    param_info{"bits", "4", "1..8", "bits per element"},
    param_info{"bucket", "512", "1..16777216", "elements per (min, max) pair"},
    param_info{"rounding", "nearest", "nearest|stochastic", "level rounding"}, p_nonfinite};
constexpr std::array onebit_params{
    param_info{"bucket", "128", "1..16777216", "elements per pair of reconstruction means"},
    p_nonfinite};
constexpr std::array sign_params{param_info{"bucket", "128", "1..16777216", "elements per scale"},
                                 param_info{"scale", "l2", "none|mean|l2",
                                            "1 (signSGD), mean |x| (EF-signSGD) or ||x||2/sqrt(n)"},
                                 p_nonfinite};
constexpr std::array cast_params{p_nonfinite};
constexpr std::array powersgd_params{
    param_info{"rank", "4", "1..64", "rank r of the approximation"},
    param_info{"eps", "1e-08", ">= 0", "Gram-Schmidt epsilon added to each column norm"},
    param_info{"min_rate", "2", ">= 0", "compress only if rows*cols > min_rate*(rows+cols)*r"},
    p_nonfinite};

constexpr param_info p_rounding{"rounding", "nearest", "nearest|stochastic",
                                "element rounding (ties to even, or stochastic)"};
constexpr param_info p_rotate{"rotate", "0", "0|1",
                              "randomized Hadamard rotation of each block before quantizing"};
constexpr param_info p_mx_block{"block", "32", "1..16777216", "elements per E8M0 scale"};
constexpr std::array mxfp8_params{param_info{"fmt", "e4m3", "e4m3|e5m2", "FP8 element format"},
                                  p_mx_block, p_rounding, p_rotate, p_nonfinite};
constexpr std::array mxfp6_params{param_info{"fmt", "e3m2", "e3m2|e2m3", "FP6 element format"},
                                  p_mx_block, p_rounding, p_rotate, p_nonfinite};
constexpr std::array mx_single_params{p_mx_block, p_rounding, p_rotate, p_nonfinite};
constexpr std::array nvfp4_params{
    param_info{"block", "16", "1..16777216", "elements per E4M3 scale"}, p_rounding, p_rotate,
    p_nonfinite};
constexpr std::array fp8row_params{
    param_info{"fmt", "e4m3", "e4m3|e5m2", "FP8 element format"},
    param_info{"block", "4096", "1..16777216",
               "row length of a flat tensor (a matrix's rows are its own)"},
    p_rounding, p_rotate, p_nonfinite};

constexpr std::array<codec_info, codec_count> codec_table{{
    {codec_id::topk, "topk", "exact top-k by magnitude, ties to the lower index",
     "64*k/n (u32 indices)", false, topk_params},
    {codec_id::dgc, "dgc", "DGC sampled-threshold top-k, exactly k sent", "64*k/n (u32 indices)",
     false, dgc_params},
    {codec_id::randomk, "randomk", "stratified random-k from the shared seed, values only",
     "32*k/n", false, randomk_params},
    {codec_id::threshold, "threshold", "all |x| >= tau (variable count, optional cap)",
     "64*m/n for m kept", false, threshold_params},
    {codec_id::qsgd, "qsgd", "QSGD: s levels, bucket norm, stochastic rounding",
     "ceil(log2(2s+1)) + 32/bucket", true, qsgd_params},
    {codec_id::terngrad, "terngrad", "TernGrad: {-s,0,s} per bucket, stochastic", "2 + 32/bucket",
     false, terngrad_params},
    {codec_id::minmax, "minmax", "min-max b-bit per bucket", "bits + 64/bucket", false,
     minmax_params},
    {codec_id::onebit, "onebit", "1-bit SGD: two reconstruction means per bucket", "1 + 64/bucket",
     false, onebit_params},
    {codec_id::sign, "sign", "signSGD / scaled sign (EF-signSGD)", "1 + 32/bucket", false,
     sign_params},
    {codec_id::fp16, "fp16", "IEEE half cast, round to nearest even", "16", false, cast_params},
    {codec_id::bf16, "bf16", "bfloat16 cast, round to nearest even", "16", false, cast_params},
    {codec_id::powersgd, "powersgd", "PowerSGD rank-r low-rank approximation", "32*r*(rows+cols)/n",
     false, powersgd_params},
    {codec_id::mxfp8, "mxfp8", "OCP MXFP8: FP8 elements, E8M0 scale per block", "8 + 8/block",
     false, mxfp8_params},
    {codec_id::mxfp6, "mxfp6", "OCP MXFP6: FP6 elements, E8M0 scale per block", "6 + 8/block",
     false, mxfp6_params},
    {codec_id::mxfp4, "mxfp4", "OCP MXFP4: E2M1 elements, E8M0 scale per block", "4 + 8/block",
     false, mx_single_params},
    {codec_id::mxint8, "mxint8", "OCP MXINT8: 8-bit integers, E8M0 scale per block", "8 + 8/block",
     false, mx_single_params},
    {codec_id::nvfp4, "nvfp4", "NVFP4: E2M1 elements, E4M3 scale per block, f32 per tensor",
     "4 + 8/block", false, nvfp4_params},
    {codec_id::fp8row, "fp8row", "row-wise FP8: f32 scale per row", "8 + 32/row", false,
     fp8row_params},
}};

bool has_key(codec_id id, std::string_view key) {
  for (const auto& p : info(id).params)
    if (p.key == key) return true;
  return false;
}

status spec_error(std::string_view a, std::string_view b = {}, std::string_view c = {}) {
  std::string m;
  m.reserve(a.size() + b.size() + c.size());
  m.append(a).append(b).append(c);
  return {status_code::invalid_spec, m};
}

template <class T>
bool parse_number(std::string_view s, T& out) {
  const auto* end = s.data() + s.size();
  auto [ptr, ec] = std::from_chars(s.data(), end, out);
  return ec == std::errc{} && ptr == end;
}

status set_param(codec_spec& spec, std::string_view key, std::string_view value) {
  const auto bad = [&] {
    return spec_error("bad value '", value, std::string("' for key '").append(key).append("'"));
  };
  double d = 0;
  std::uint64_t u = 0;
  if (key == "ratio") {
    if (!parse_number(value, d)) return bad();
    spec.ratio = d;
  } else if (key == "k") {
    if (!parse_number(value, u)) return bad();
    spec.k = u;
  } else if (key == "sample") {
    if (!parse_number(value, d)) return bad();
    spec.sample = d;
  } else if (key == "unbiased" || key == "rotate") {
    bool on = false;
    if (value == "1" || value == "true")
      on = true;
    else if (value != "0" && value != "false")
      return bad();
    (key == "unbiased" ? spec.unbiased : spec.rotate) = on;
  } else if (key == "tau" || key == "clip" || key == "eps" || key == "min_rate") {
    if (!parse_number(value, d) || !std::isfinite(d) || std::fabs(d) > 3.0e38) return bad();
    (key == "tau"    ? spec.tau
     : key == "clip" ? spec.clip
     : key == "eps"  ? spec.eps
                     : spec.min_rate) = static_cast<float>(d);
  } else if (key == "cap") {
    if (!parse_number(value, u)) return bad();
    spec.cap = u;
  } else if (key == "levels" || key == "bucket" || key == "block" || key == "bits" ||
             key == "rank") {
    if (!parse_number(value, u) || u > 0xFFFFFFFFu) return bad();
    // "block" is the block-scaled codecs' name for the elements per scale.
    (key == "levels" ? spec.levels
     : key == "bits" ? spec.bits
     : key == "rank" ? spec.rank
                     : spec.bucket) = static_cast<std::uint32_t>(u);
  } else if (key == "fmt") {
    auto f = element_format_from_name(value);
    if (!f) return bad();
    spec.fmt = f.value();
  } else if (key == "rounding") {
    if (value == "nearest")
      spec.rounding = rounding_mode::nearest;
    else if (value == "stochastic")
      spec.rounding = rounding_mode::stochastic;
    else
      return bad();
  } else if (key == "norm") {
    if (value == "l2")
      spec.norm = norm_kind::l2;
    else if (value == "max")
      spec.norm = norm_kind::max;
    else
      return bad();
  } else if (key == "scale") {
    if (value == "none")
      spec.scale = scale_kind::none;
    else if (value == "mean")
      spec.scale = scale_kind::mean;
    else if (value == "l2")
      spec.scale = scale_kind::l2;
    else
      return bad();
  } else if (key == "nonfinite") {
    if (value == "propagate")
      spec.nonfinite = nonfinite_policy::propagate;
    else if (value == "error")
      spec.nonfinite = nonfinite_policy::error;
    else
      return bad();
  } else {
    return spec_error("unknown key '", key, "'");
  }
  return {};
}

std::string format_double(double v) {
  char buf[64];
  auto [ptr, ec] = std::to_chars(buf, buf + sizeof buf, v);
  return ec == std::errc{} ? std::string(buf, ptr) : std::string("nan");
}

std::string format_float(float v) {
  char buf[64];
  auto [ptr, ec] = std::to_chars(buf, buf + sizeof buf, v);
  return ec == std::errc{} ? std::string(buf, ptr) : std::string("nan");
}

}  // namespace

std::span<const codec_info> all_codecs() noexcept { return codec_table; }

const codec_info& info(codec_id id) noexcept {
  const auto i = static_cast<std::size_t>(id) - 1;
  return codec_table[i < codec_table.size() ? i : 0];
}

std::string_view codec_name(codec_id id) noexcept {
  const auto i = static_cast<std::size_t>(id) - 1;
  return i < codec_table.size() ? codec_table[i].name : "unknown"sv;
}

result<codec_id> codec_from_name(std::string_view name) {
  for (const auto& c : codec_table)
    if (c.name == name) return c.id;
  std::string known;
  for (const auto& c : codec_table) known.append(known.empty() ? "" : ",").append(c.name);
  return spec_error("unknown codec '", name, std::string("' (known: ").append(known).append(")"));
}

codec_spec make_spec(codec_id id) noexcept {
  codec_spec s;
  s.id = id;
  // Defaults chosen by the convergence suite (docs/codecs.md, "Defaults").
  switch (id) {
    case codec_id::qsgd:
      s.rounding = rounding_mode::stochastic;
      s.norm = norm_kind::max;
      break;
    case codec_id::topk:
    case codec_id::dgc: s.ratio = 0.07; break;
    case codec_id::randomk: s.ratio = 0.5; break;
    case codec_id::threshold: s.tau = 0.005f; break;
    case codec_id::terngrad: s.clip = 2.5f; break;
    case codec_id::onebit: s.bucket = 128; break;
    case codec_id::sign:
      s.bucket = 128;
      s.scale = scale_kind::l2;
      break;
    case codec_id::mxfp8:
    case codec_id::mxfp6:
    case codec_id::mxfp4:
    case codec_id::mxint8:
      s.bucket = 32;
      s.fmt = id == codec_id::mxfp6    ? element_format::e3m2
              : id == codec_id::mxfp4  ? element_format::e2m1
              : id == codec_id::mxint8 ? element_format::int8
                                       : element_format::e4m3;
      break;
    case codec_id::nvfp4:
      s.bucket = 16;
      s.fmt = element_format::e2m1;
      break;
    case codec_id::fp8row: s.bucket = 4096; break;
    default: break;
  }
  return s;
}

result<element_format> element_format_from_name(std::string_view name) {
  for (const auto f : {element_format::e4m3, element_format::e5m2, element_format::e3m2,
                       element_format::e2m3, element_format::e2m1, element_format::int8})
    if (name == element_format_name(f)) return f;
  return spec_error("unknown element format '", name, "' (e4m3, e5m2, e3m2, e2m3, e2m1, int8)");
}

std::string_view element_format_name(element_format f) noexcept {
  switch (f) {
    case element_format::e4m3: return "e4m3";
    case element_format::e5m2: return "e5m2";
    case element_format::e3m2: return "e3m2";
    case element_format::e2m3: return "e2m3";
    case element_format::e2m1: return "e2m1";
    case element_format::int8: return "int8";
  }
  return "?";
}

std::uint64_t sparse_count(const codec_spec& s, std::uint64_t n) noexcept {
  if (n == 0) return 0;
  const std::uint64_t k =
      s.k > 0 ? s.k
              : std::max<std::uint64_t>(
                    1, static_cast<std::uint64_t>(s.ratio * static_cast<double>(n)));
  return std::min(k, n);
}

status validate(const codec_spec& s) {
  const auto id_raw = static_cast<int>(s.id);
  if (id_raw < 1 || id_raw > codec_count) return spec_error("invalid codec id");
  const auto name = codec_name(s.id);
  auto range = [&](std::string_view key, std::string_view want) {
    return spec_error(std::string(name).append(": ").append(key), " must be in ", want);
  };
  switch (s.id) {
    case codec_id::topk:
    case codec_id::dgc:
    case codec_id::randomk:
      if (!(s.ratio > 0.0 && s.ratio <= 1.0)) return range("ratio", "(0, 1]");
      if (s.id == codec_id::dgc && !(s.sample > 0.0 && s.sample <= 1.0))
        return range("sample", "(0, 1]");
      break;
    case codec_id::threshold:
      if (!(s.tau >= 0.0f) || !std::isfinite(s.tau)) return range("tau", "[0, FLT_MAX]");
      break;
    case codec_id::qsgd:
      if (s.levels < 1 || s.levels > 127) return range("levels", "1..127");
      break;
    case codec_id::minmax:
      if (s.bits < 1 || s.bits > 8) return range("bits", "1..8");
      break;
    case codec_id::terngrad:
      if (!(s.clip >= 0.0f) || !std::isfinite(s.clip)) return range("clip", "[0, FLT_MAX]");
      break;
    case codec_id::powersgd:
      if (s.rank < 1 || s.rank > 64) return range("rank", "1..64");
      if (!(s.eps >= 0.0f) || !std::isfinite(s.eps)) return range("eps", "[0, FLT_MAX]");
      if (!(s.min_rate >= 0.0f) || !std::isfinite(s.min_rate))
        return range("min_rate", "[0, FLT_MAX]");
      break;
    GRADCODEC_CASE_BLOCK_SCALED:
      if (!blocks::element_allowed(s.id, s.fmt))
        return spec_error(std::string(name).append(": fmt ").append(element_format_name(s.fmt)),
                          " is not one of its element formats");
      break;
    default: break;
  }
  // Elements per scale: "bucket", or "block" for the block-scaled codecs (one field).
  for (const std::string_view key : {"bucket", "block"})
    if (has_key(s.id, key) && (s.bucket < 1 || s.bucket > (1u << 24)))
      return range(key, "1..16777216");
  return {};
}

result<codec_spec> parse_spec(std::string_view text) {
  const auto colon = text.find(':');
  const auto name = text.substr(0, colon);
  auto id = codec_from_name(name);
  if (!id) return id.error();
  codec_spec spec = make_spec(id.value());
  if (colon != std::string_view::npos) {
    std::string_view rest = text.substr(colon + 1);
    if (rest.empty()) return spec_error("empty parameter list after '", name, ":'");
    while (!rest.empty()) {
      const auto comma = rest.find(',');
      const auto item = rest.substr(0, comma);
      rest = comma == std::string_view::npos ? std::string_view{} : rest.substr(comma + 1);
      const auto eq = item.find('=');
      if (eq == std::string_view::npos || eq == 0 || eq + 1 == item.size())
        return spec_error("expected key=value, got '", item, "'");
      const auto key = item.substr(0, eq);
      if (!has_key(spec.id, key))
        return spec_error(std::string("unknown key '").append(key).append("' for codec "), name);
      if (auto st = set_param(spec, key, item.substr(eq + 1)); !st.ok()) return st;
      if (comma != std::string_view::npos && rest.empty())
        return spec_error("trailing ',' in spec");
    }
  }
  if (auto st = validate(spec); !st.ok()) return st;
  return spec;
}

std::string to_string(const codec_spec& s) {
  std::string out(codec_name(s.id));
  bool first = true;
  auto add = [&](std::string_view key, const std::string& value) {
    out.append(first ? ":" : ",").append(key).append("=").append(value);
    first = false;
  };
  switch (s.id) {
    case codec_id::topk:
    case codec_id::dgc:
    case codec_id::randomk:
      if (s.k > 0)
        add("k", std::to_string(s.k));
      else
        add("ratio", format_double(s.ratio));
      if (s.id == codec_id::dgc) add("sample", format_double(s.sample));
      if (s.id == codec_id::randomk) add("unbiased", s.unbiased ? "1" : "0");
      break;
    case codec_id::threshold:
      add("tau", format_float(s.tau));
      if (s.cap > 0) add("cap", std::to_string(s.cap));
      break;
    case codec_id::qsgd:
      add("levels", std::to_string(s.levels));
      add("bucket", std::to_string(s.bucket));
      add("norm", s.norm == norm_kind::l2 ? "l2" : "max");
      add("rounding", s.rounding == rounding_mode::nearest ? "nearest" : "stochastic");
      break;
    case codec_id::terngrad:
      add("bucket", std::to_string(s.bucket));
      add("clip", format_float(s.clip));
      break;
    case codec_id::minmax:
      add("bits", std::to_string(s.bits));
      add("bucket", std::to_string(s.bucket));
      add("rounding", s.rounding == rounding_mode::nearest ? "nearest" : "stochastic");
      break;
    case codec_id::onebit: add("bucket", std::to_string(s.bucket)); break;
    case codec_id::sign:
      add("bucket", std::to_string(s.bucket));
      add("scale", s.scale == scale_kind::none   ? "none"
                   : s.scale == scale_kind::mean ? "mean"
                                                 : "l2");
      break;
    case codec_id::powersgd:
      add("rank", std::to_string(s.rank));
      add("eps", format_float(s.eps));
      add("min_rate", format_float(s.min_rate));
      break;
    GRADCODEC_CASE_BLOCK_SCALED:
      if (has_key(s.id, "fmt")) add("fmt", std::string(element_format_name(s.fmt)));
      add("block", std::to_string(s.bucket));
      add("rounding", s.rounding == rounding_mode::nearest ? "nearest" : "stochastic");
      add("rotate", s.rotate ? "1" : "0");
      break;
    default: break;
  }
  if (s.nonfinite == nonfinite_policy::error) add("nonfinite", "error");
  return out;
}

}  // namespace gradcodec
