// SPDX-License-Identifier: Apache-2.0
//! @file
//! NumPy .npy reading and writing (numpy/lib/format.py is the specification).
#include "npy.hpp"

#include <cstdint>
#include <cstring>
#include <optional>

#include "error.hpp"
#include "file_io.hpp"

namespace gradcodec::tool {
namespace {

constexpr char npy_magic[6] = {'\x93', 'N', 'U', 'M', 'P', 'Y'};
constexpr std::size_t header_align = 64;  // numpy aligns the data start to 64 bytes
constexpr std::uint64_t max_elements = std::uint64_t{1} << 48;  // the library's limit

//! One value of the header's Python dict literal: the subset numpy writes.
struct py_value {
  enum class kind { string, boolean, tuple } k = kind::string;
  std::string text;
  bool flag = false;
  std::vector<std::uint64_t> items;
};

//! A recursive-descent reader for {'key': value, ...} with string, True/False and
//! tuple-of-int values (what ast.literal_eval would accept for a valid header).
class header_parser {
 public:
  header_parser(std::string_view text, const std::string& name) : s_(text), name_(name) {}

  std::vector<std::pair<std::string, py_value>> dict() {
    std::vector<std::pair<std::string, py_value>> out;
    skip_ws();
    expect('{');
    for (;;) {
      skip_ws();
      if (peek() == '}') {
        ++pos_;
        break;
      }
      std::string key = string_literal();
      for (const auto& [k, v] : out)
        if (k == key) bad("duplicate key '" + key + "'");
      skip_ws();
      expect(':');
      skip_ws();
      out.emplace_back(std::move(key), value());
      skip_ws();
      if (peek() == ',') {
        ++pos_;
      } else if (peek() != '}') {
        bad("expected ',' or '}'");
      }
    }
    skip_ws();
    if (pos_ != s_.size()) bad("unexpected text after the dictionary");
    return out;
  }

 private:
  [[noreturn]] void bad(const std::string& what) const {
    fail("'" + name_ + "': malformed npy header: " + what + " at offset " + std::to_string(pos_));
  }
  char peek() const { return pos_ < s_.size() ? s_[pos_] : '\0'; }
  void skip_ws() {
    while (pos_ < s_.size() &&
           (s_[pos_] == ' ' || s_[pos_] == '\t' || s_[pos_] == '\n' || s_[pos_] == '\r'))
      ++pos_;
  }
  void expect(char c) {
    if (peek() != c) bad(std::string("expected '") + c + "'");
    ++pos_;
  }
  std::string string_literal() {
    const char q = peek();
    if (q != '\'' && q != '"') bad("expected a string");
    ++pos_;
    const auto end = s_.find(q, pos_);
    if (end == std::string_view::npos) bad("unterminated string");
    std::string out(s_.substr(pos_, end - pos_));
    if (out.find('\\') != std::string::npos) bad("escape sequences are not supported");
    pos_ = end + 1;
    return out;
  }
  std::uint64_t integer() {
    if (peek() == '-') bad("negative dimension");
    if (peek() < '0' || peek() > '9') bad("expected a dimension");
    std::uint64_t v = 0;
    while (peek() >= '0' && peek() <= '9') {
      const auto d = static_cast<std::uint64_t>(peek() - '0');
      if (v > (UINT64_MAX - d) / 10) bad("dimension too large");
      v = v * 10 + d;
      ++pos_;
    }
    if (peek() == 'L') ++pos_;  // Python 2 longs, found in old files
    return v;
  }
  py_value value() {
    py_value v;
    const char c = peek();
    if (c == '\'' || c == '"') {
      v.k = py_value::kind::string;
      v.text = string_literal();
    } else if (s_.substr(pos_, 4) == "True") {
      v.k = py_value::kind::boolean;
      v.flag = true;
      pos_ += 4;
    } else if (s_.substr(pos_, 5) == "False") {
      v.k = py_value::kind::boolean;
      pos_ += 5;
    } else if (c == '(') {
      v.k = py_value::kind::tuple;
      ++pos_;
      bool trailing_comma = false;
      for (;;) {
        skip_ws();
        if (peek() == ')') {
          ++pos_;
          break;
        }
        v.items.push_back(integer());
        skip_ws();
        trailing_comma = peek() == ',';
        if (trailing_comma)
          ++pos_;
        else if (peek() != ')')
          bad("expected ',' or ')' in the shape");
      }
      // "(3)" is the integer 3 in Python, not a 1-tuple.
      if (v.items.size() == 1 && !trailing_comma) bad("shape is not a tuple");
    } else if (c == '[') {
      bad("structured dtypes (a descr list) are not supported");
    } else {
      bad("unsupported value");
    }
    return v;
  }

  std::string_view s_;
  const std::string& name_;
  std::size_t pos_ = 0;
};

template <class T>
T read_le(const std::byte* p) {
  T v;
  std::memcpy(&v, p, sizeof v);  // little-endian hosts only (see docs/format.md)
  return v;
}

}  // namespace

array parse_npy(std::span<const std::byte> bytes, const std::string& name) {
  const std::string where = "'" + name + "': ";
  if (bytes.size() < 6 || std::memcmp(bytes.data(), npy_magic, 6) != 0)
    fail(where + "not a .npy file (bad magic)");
  if (bytes.size() < 10) fail(where + "truncated npy header");
  const auto major = static_cast<int>(bytes[6]);
  const auto minor = static_cast<int>(bytes[7]);
  if (major < 1 || major > 3 || minor != 0)
    fail(where + "unsupported npy format version " + std::to_string(major) + "." +
         std::to_string(minor) + " (reads 1.0, 2.0 and 3.0)");
  const std::size_t preamble = major == 1 ? 10 : 12;
  if (bytes.size() < preamble) fail(where + "truncated npy header");
  const std::uint64_t header_len = major == 1 ? read_le<std::uint16_t>(bytes.data() + 8)
                                              : read_le<std::uint32_t>(bytes.data() + 8);
  if (header_len > bytes.size() - preamble)
    fail(where + "truncated npy header (" + std::to_string(header_len) +
         " header bytes announced, " + std::to_string(bytes.size() - preamble) + " present)");
  const std::string_view text(reinterpret_cast<const char*>(bytes.data()) + preamble, header_len);

  header_parser parser(text, name);
  std::optional<py_value> descr, fortran, shape;
  for (auto& [key, v] : parser.dict()) {
    if (key == "descr")
      descr = std::move(v);
    else if (key == "fortran_order")
      fortran = std::move(v);
    else if (key == "shape")
      shape = std::move(v);
    else
      fail(where + "unexpected key '" + key + "' in the npy header");
  }
  if (!descr || !fortran || !shape)
    fail(where + "npy header lacks '" +
         std::string(!descr     ? "descr"
                     : !fortran ? "fortran_order"
                                : "shape") +
         "'");
  if (descr->k != py_value::kind::string) fail(where + "npy descr is not a string");
  if (fortran->k != py_value::kind::boolean) fail(where + "npy fortran_order is not True or False");
  if (shape->k != py_value::kind::tuple) fail(where + "npy shape is not a tuple");

  array a;
  if (descr->text == "<f4") {
    a.type = dtype::f32;
  } else if (descr->text == "<f2") {
    a.type = dtype::f16;
  } else {
    fail(where + "unsupported npy dtype '" + descr->text +
         "' (gradcodec reads '<f4' float32 and '<f2' float16)");
  }
  if (fortran->flag)
    fail(where +
         "fortran_order=True arrays are not supported (save a C-order array, e.g. "
         "np.ascontiguousarray)");
  a.shape = std::move(shape->items);
  std::uint64_t n = 0;
  if (!element_count(a.shape, max_elements, n))
    fail(where + "shape " + shape_string(a.shape) + " has more than 2^48 elements");

  const std::uint64_t have = bytes.size() - preamble - header_len;
  const std::uint64_t need = n * dtype_size(a.type);
  if (have < need)
    fail(where + "truncated npy data (" + std::to_string(need) + " bytes needed, " +
         std::to_string(have) + " present)");
  if (have > need)
    fail(where + std::to_string(have - need) + " unexpected bytes after the npy data");
  const std::byte* src = bytes.data() + preamble + header_len;
  if (a.type == dtype::f32) {
    a.f32.resize(n);
    if (n > 0) std::memcpy(a.f32.data(), src, need);
  } else {
    a.half.resize(n);
    if (n > 0) std::memcpy(a.half.data(), src, need);
  }
  return a;
}

std::vector<std::byte> format_npy_header(const array& a, int major_version) {
  if (a.type == dtype::bf16) fail("bfloat16 cannot be stored in a .npy file");
  std::string dict = "{'descr': '";
  dict += a.type == dtype::f32 ? "<f4" : "<f2";
  dict += "', 'fortran_order': False, 'shape': (";
  for (std::size_t i = 0; i < a.shape.size(); ++i)
    dict += (i ? ", " : "") + std::to_string(a.shape[i]);
  dict += a.shape.size() == 1 ? ",), }" : "), }";

  const auto padded = [&](std::size_t preamble) {
    const std::size_t unpadded = preamble + dict.size() + 1;  // + the final '\n'
    return dict.size() + 1 + (header_align - unpadded % header_align) % header_align;
  };
  int major = major_version;
  if (major == 0) major = padded(10) <= 0xFFFF ? 1 : 2;
  if (major < 1 || major > 3) fail("npy format version must be 1, 2 or 3");
  const std::size_t preamble = major == 1 ? 10 : 12;
  const std::size_t header_len = padded(preamble);
  if (major == 1 && header_len > 0xFFFF) fail("npy header too long for format version 1.0");

  std::vector<std::byte> out(preamble + header_len);
  std::memcpy(out.data(), npy_magic, 6);
  out[6] = static_cast<std::byte>(major);
  out[7] = std::byte{0};
  if (major == 1) {
    const auto len = static_cast<std::uint16_t>(header_len);
    std::memcpy(out.data() + 8, &len, 2);
  } else {
    const auto len = static_cast<std::uint32_t>(header_len);
    std::memcpy(out.data() + 8, &len, 4);
  }
  std::memcpy(out.data() + preamble, dict.data(), dict.size());
  std::memset(out.data() + preamble + dict.size(), ' ', header_len - dict.size() - 1);
  out[preamble + header_len - 1] = std::byte{'\n'};
  return out;
}

static std::span<const std::byte> npy_data(const array& a) {
  return {static_cast<const std::byte*>(a.data()), a.size() * dtype_size(a.type)};
}

std::vector<std::byte> format_npy(const array& a, int major_version) {
  auto out = format_npy_header(a, major_version);
  const auto data = npy_data(a);
  out.insert(out.end(), data.begin(), data.end());
  return out;
}

array read_npy(const std::string& path) { return parse_npy(read_file(path), path); }

void write_npy(const std::string& path, const array& a, int major_version) {
  const auto header = format_npy_header(a, major_version);
  write_file(path, {std::span<const std::byte>(header), npy_data(a)});
}

}  // namespace gradcodec::tool
