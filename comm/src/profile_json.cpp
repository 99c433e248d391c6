// SPDX-License-Identifier: Apache-2.0
//! @file
//! A cost profile as JSON and back: the writer prints every number with 17 significant
//! digits (so it reads back to the same double, and a plan from a saved profile equals the
//! plan from the measured one); the reader is a small recursive-descent parser for the
//! subset the writer produces (objects, arrays, strings without escapes other than \" and
//! \\, numbers).
#include <charconv>
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "gradcodec/comm/calibrate.hpp"

namespace gradcodec::comm {

namespace {

constexpr const char* format_name = "gradcodec-cost-profile";
constexpr int format_version = 1;

std::string number(double v) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

std::string quoted(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out.push_back('\\');
    out.push_back(c);
  }
  return out + "\"";
}

std::string cost_json(const op_cost& c) {
  return "{\"fixed_s\": " + number(c.fixed_s) + ", \"per_element_s\": " + number(c.per_element_s) +
         "}";
}

std::string link_json(const collective_cost& c) {
  return "{\"step_latency_s\": " + number(c.step_latency_s) +
         ", \"bytes_per_s\": " + number(c.bytes_per_s) + "}";
}

// --- reading -----------------------------------------------------------------------------

struct value {
  enum class kind { number, string, object, array } k = kind::number;
  double num = 0;
  std::string str;
  std::map<std::string, value> obj;
  std::vector<value> arr;
};

class parser {
 public:
  explicit parser(std::string_view t) : t_(t) {}

  result<value> document() {
    auto v = parse();
    if (!v.ok()) return v;
    skip();
    if (i_ != t_.size()) return fail("trailing characters");
    return v;
  }

 private:
  status fail(const std::string& what) const {
    return status{status_code::invalid_argument,
                  "cost profile JSON: " + what + " at offset " + std::to_string(i_)};
  }
  void skip() {
    while (i_ < t_.size() && (t_[i_] == ' ' || t_[i_] == '\n' || t_[i_] == '\t' || t_[i_] == '\r'))
      ++i_;
  }
  bool eat(char c) {
    skip();
    if (i_ < t_.size() && t_[i_] == c) {
      ++i_;
      return true;
    }
    return false;
  }
  result<std::string> string() {
    if (!eat('"')) return fail("expected a string");
    std::string s;
    while (i_ < t_.size() && t_[i_] != '"') {
      if (t_[i_] == '\\') {
        if (++i_ == t_.size() || (t_[i_] != '"' && t_[i_] != '\\')) return fail("unknown escape");
      }
      s.push_back(t_[i_++]);
    }
    if (i_ == t_.size()) return fail("unterminated string");
    ++i_;
    return s;
  }
  result<value> parse() {
    if (++depth_ > 16) return fail("nesting too deep");
    skip();
    if (i_ == t_.size()) return fail("unexpected end");
    value v;
    const char c = t_[i_];
    if (c == '{') {
      v.k = value::kind::object;
      ++i_;
      if (!eat('}')) {
        do {
          auto key = string();
          if (!key.ok()) return key.error();
          if (!eat(':')) return fail("expected ':'");
          auto item = parse();
          if (!item.ok()) return item;
          v.obj[key.value()] = std::move(item.value());
        } while (eat(','));
        if (!eat('}')) return fail("expected '}'");
      }
    } else if (c == '[') {
      v.k = value::kind::array;
      ++i_;
      if (!eat(']')) {
        do {
          auto item = parse();
          if (!item.ok()) return item;
          v.arr.push_back(std::move(item.value()));
        } while (eat(','));
        if (!eat(']')) return fail("expected ']'");
      }
    } else if (c == '"') {
      v.k = value::kind::string;
      auto s = string();
      if (!s.ok()) return s.error();
      v.str = std::move(s.value());
    } else {
      const char* b = t_.data() + i_;
      auto [end, ec] = std::from_chars(b, t_.data() + t_.size(), v.num);
      if (ec != std::errc{}) return fail("expected a value");
      i_ += static_cast<std::size_t>(end - b);
    }
    --depth_;
    return v;
  }

  std::string_view t_;
  std::size_t i_ = 0;
  int depth_ = 0;
};

//! Field access with errors naming the path.
struct reader {
  status error;
  const value* field(const value& o, const std::string& key, value::kind k, const std::string& at) {
    if (!error.ok()) return nullptr;
    auto it = o.obj.find(key);
    if (o.k != value::kind::object || it == o.obj.end() || it->second.k != k) {
      error = status{status_code::invalid_argument,
                     "cost profile JSON: missing or mistyped field " + at + key};
      return nullptr;
    }
    return &it->second;
  }
  double num(const value& o, const std::string& key, const std::string& at) {
    const value* v = field(o, key, value::kind::number, at);
    if (v == nullptr) return 0;
    if (!(v->num >= 0) || v->num > 1e300) {
      error = status{status_code::invalid_argument,
                     "cost profile JSON: " + at + key + " must be a finite number >= 0"};
      return 0;
    }
    return v->num;
  }
  //! A finite number of either sign.
  double signed_num(const value& o, const std::string& key, const std::string& at) {
    const value* v = field(o, key, value::kind::number, at);
    if (v == nullptr) return 0;
    if (!(std::abs(v->num) <= 1e300)) {
      error = status{status_code::invalid_argument,
                     "cost profile JSON: " + at + key + " must be a finite number"};
      return 0;
    }
    return v->num;
  }
  op_cost cost(const value& o, const std::string& key, const std::string& at) {
    op_cost c;
    const value* v = field(o, key, value::kind::object, at);
    if (v == nullptr) return c;
    c.fixed_s = num(*v, "fixed_s", at + key + ".");
    c.per_element_s = num(*v, "per_element_s", at + key + ".");
    return c;
  }
  //! `at`: the link's field name with its dot ("link." or "intra_link."), for messages.
  link_profile link_of(const value& o, const std::string& at) {
    link_profile l;
    l.allgather = link(o, "allgather", at);
    l.alltoall = link(o, "alltoall", at);
    l.allreduce = link(o, "allreduce", at);
    l.overlap = num(o, "overlap", at);
    l.burst_bytes = num(o, "burst_bytes", at);
    if (error.ok() && l.overlap > 1)
      error = status{status_code::invalid_argument,
                     "cost profile JSON: " + at + "overlap must be <= 1"};
    return l;
  }

  collective_cost link(const value& o, const std::string& key, const std::string& at) {
    collective_cost c;
    const value* v = field(o, key, value::kind::object, at);
    if (v == nullptr) return c;
    c.step_latency_s = num(*v, "step_latency_s", at + key + ".");
    c.bytes_per_s = num(*v, "bytes_per_s", at + key + ".");
    if (error.ok() && c.bytes_per_s <= 0)
      error = status{status_code::invalid_argument,
                     "cost profile JSON: " + at + key + ".bytes_per_s must be > 0"};
    return c;
  }
};

std::string link_profile_json(const link_profile& l) {
  std::string s = "{\"allgather\": ";
  s.append(link_json(l.allgather));
  s.append(", \"alltoall\": ").append(link_json(l.alltoall));
  s.append(", \"allreduce\": ").append(link_json(l.allreduce));
  s.append(", \"overlap\": ").append(number(l.overlap));
  s.append(", \"burst_bytes\": ").append(number(l.burst_bytes)).append("}");
  return s;
}

}  // namespace

std::string profile_to_json(const cost_profile& p) {
  std::string s = "{\n  \"format\": \"";
  s.append(format_name).append("\",\n  \"version\": ").append(std::to_string(format_version));
  s.append(",\n  \"ranks\": ").append(std::to_string(p.ranks));
  s.append(",\n  \"link\": ").append(link_profile_json(p.link));
  if (p.intra) s.append(",\n  \"intra_link\": ").append(link_profile_json(*p.intra));
  s.append(",\n  \"copy\": ").append(cost_json(p.compute.copy));
  s.append(",\n  \"codecs\": [");
  for (std::size_t i = 0; i < p.compute.codecs.size(); ++i) {
    const codec_costs& c = p.compute.codecs[i];
    s.append(i == 0 ? "\n" : ",\n");
    s.append("    {\"spec\": ").append(quoted(to_string(c.spec)));
    s.append(",\n     \"encode\": ").append(cost_json(c.encode));
    s.append(",\n     \"encode_with_feedback\": ").append(cost_json(c.encode_with_feedback));
    s.append(",\n     \"decode\": ").append(cost_json(c.decode));
    s.append(",\n     \"decode_accumulate\": ").append(cost_json(c.decode_accumulate));
    s.append(",\n     \"frame_bytes_per_element\": ").append(number(c.frame_bytes_per_element));
    s.append(",\n     \"in_call\": [");
    for (std::size_t k = 0; k < c.in_call.size(); ++k)
      s.append(k == 0 ? "" : ", ")
          .append("{\"strategy\": ")
          .append(quoted(std::string(strategy_name(c.in_call[k].how))))
          .append(", \"pipeline\": ")
          .append(c.in_call[k].pipeline ? "1" : "0")
          .append(", \"compute\": ")
          .append(number(c.in_call[k].compute))
          .append(", \"wait\": ")
          .append(number(c.in_call[k].wait))
          .append("}");
    s.append("]}");
  }
  s.append("\n  ]\n}\n");
  return s;
}

result<cost_profile> profile_from_json(std::string_view text) {
  auto doc = parser(text).document();
  if (!doc.ok()) return doc.error();
  const value& root = doc.value();
  reader rd;
  const value* fmt = rd.field(root, "format", value::kind::string, "");
  if (fmt != nullptr && fmt->str != format_name)
    return status{status_code::invalid_argument,
                  "cost profile JSON: format is '" + fmt->str + "', expected " + format_name};
  const double version = rd.num(root, "version", "");
  if (rd.error.ok() && version != format_version)
    return status{status_code::invalid_argument, "cost profile JSON: version " + number(version) +
                                                     " is not supported (this "
                                                     "library reads version 1)"};
  cost_profile p;
  p.ranks = static_cast<int>(rd.num(root, "ranks", ""));
  if (const value* l = rd.field(root, "link", value::kind::object, ""))
    p.link = rd.link_of(*l, "link.");
  if (root.obj.count("intra_link") != 0)  // optional: a flat job's profile has none
    if (const value* l = rd.field(root, "intra_link", value::kind::object, ""))
      p.intra = rd.link_of(*l, "intra_link.");
  p.compute.copy = rd.cost(root, "copy", "");
  if (const value* list = rd.field(root, "codecs", value::kind::array, "")) {
    for (std::size_t i = 0; i < list->arr.size() && rd.error.ok(); ++i) {
      const value& c = list->arr[i];
      const std::string at = "codecs[" + std::to_string(i) + "].";
      const value* spec = rd.field(c, "spec", value::kind::string, at);
      if (spec == nullptr) break;
      auto parsed = parse_spec(spec->str);
      if (!parsed.ok())
        return status{status_code::invalid_argument,
                      "cost profile JSON: " + at + "spec: " + parsed.error().message()};
      codec_costs cc;
      cc.spec = parsed.value();
      cc.encode = rd.cost(c, "encode", at);
      cc.encode_with_feedback = rd.cost(c, "encode_with_feedback", at);
      cc.decode = rd.cost(c, "decode", at);
      cc.decode_accumulate = rd.cost(c, "decode_accumulate", at);
      cc.frame_bytes_per_element = rd.num(c, "frame_bytes_per_element", at);
      if (c.obj.count("in_call") != 0) {  // optional: a profile without calls
        const value* calls = rd.field(c, "in_call", value::kind::array, at);
        for (std::size_t k = 0; calls != nullptr && k < calls->arr.size() && rd.error.ok(); ++k) {
          const value& f = calls->arr[k];
          const std::string fat = at + "in_call[" + std::to_string(k) + "].";
          const value* how = rd.field(f, "strategy", value::kind::string, fat);
          if (how == nullptr) break;
          auto parsed_how = strategy_from_name(how->str);
          if (!parsed_how.ok() || !supported_strategies(cc.spec.id).contains(parsed_how.value()))
            return status{status_code::invalid_argument, "cost profile JSON: " + fat +
                                                             "strategy '" + how->str +
                                                             "' is not one the codec supports"};
          in_call_factor factor;
          factor.how = parsed_how.value();
          const double pipe = rd.num(f, "pipeline", fat);
          if (rd.error.ok() && pipe != 0 && pipe != 1)
            return status{status_code::invalid_argument,
                          "cost profile JSON: " + fat + "pipeline must be 0 or 1"};
          factor.pipeline = pipe == 1;
          factor.compute = rd.num(f, "compute", fat);
          factor.wait = rd.signed_num(f, "wait", fat);
          cc.in_call.push_back(factor);
        }
      }
      p.compute.codecs.push_back(cc);
    }
  }
  if (!rd.error.ok()) return rd.error;
  return p;
}

}  // namespace gradcodec::comm
