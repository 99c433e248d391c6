// SPDX-License-Identifier: Apache-2.0
//! @file
//! Spec strings: parsing, validation and printing. What each codec's parameters are, their
//! defaults, ranges and canonical order, its descriptor says (src/codecs/).
#include "gradcodec/spec.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <string>

#include "src/codecs/descriptor.hpp"

namespace gradcodec {
namespace {

using namespace std::string_view_literals;

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

}  // namespace

result<codec_id> codec_from_name(std::string_view name) {
  for (const auto& c : all_codecs())
    if (c.name == name) return c.id;
  std::string known;
  for (const auto& c : all_codecs()) known.append(known.empty() ? "" : ",").append(c.name);
  return spec_error("unknown codec '", name, std::string("' (known: ").append(known).append(")"));
}

codec_spec make_spec(codec_id id) noexcept {
  codec_spec s;
  s.id = id;
  const auto raw = static_cast<int>(id);
  if (raw < 1 || raw > codec_count) return s;
  // Defaults chosen by the convergence suite (docs/codecs.md, "Defaults").
  if (const auto defaults = detail::descriptor_of(id).defaults) defaults(s);
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
  if (const auto check = detail::descriptor_of(s.id).check)
    if (auto st = check(s); !st.ok()) return st;
  // Elements per scale: "bucket", or "block" for the block-scaled codecs (one field).
  for (const std::string_view key : {"bucket", "block"})
    if (has_key(s.id, key) && (s.bucket < 1 || s.bucket > (1u << 24)))
      return detail::out_of_range(s, key, "1..16777216");
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
  const auto raw = static_cast<int>(s.id);
  if (raw < 1 || raw > codec_count) return out;
  detail::spec_printer params(out);
  if (const auto print = detail::descriptor_of(s.id).print) print(s, params);
  if (s.nonfinite == nonfinite_policy::error) params.add("nonfinite", "error");
  return out;
}

}  // namespace gradcodec
