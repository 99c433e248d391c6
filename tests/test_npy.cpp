// SPDX-License-Identifier: Apache-2.0
// The tool's .npy reader and writer: round trips for every supported dtype, shape and
// header version, hand-written headers in other styles, and clear errors for bad files.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "error.hpp"
#include "npy.hpp"

namespace gc = gradcodec;
namespace tool = gradcodec::tool;

namespace {

tool::array sample(gc::dtype t, std::vector<std::uint64_t> shape) {
  tool::array a = tool::array::zeros(t, std::move(shape));
  std::uint32_t state = 777;
  for (std::uint64_t i = 0; i < a.size(); ++i) {
    state = state * 1664525u + 1013904223u;
    if (t == gc::dtype::f32)
      a.f32[i] = static_cast<float>(static_cast<std::int32_t>(state)) * 1e-9f;
    else
      a.half[i] = static_cast<std::uint16_t>(state >> 16);  // any bits, NaNs included
  }
  return a;
}

std::vector<std::byte> bytes_of(const std::string& s) {
  std::vector<std::byte> b(s.size());
  std::memcpy(b.data(), s.data(), s.size());
  return b;
}

//! A .npy file from a header dictionary written by hand (version 1.0 unless told).
std::vector<std::byte> handmade(const std::string& dict, std::size_t data_bytes, int major = 1) {
  std::string h = "\x93NUMPY";
  h += static_cast<char>(major);
  h += '\0';
  const std::uint32_t len = static_cast<std::uint32_t>(dict.size());
  h.append(reinterpret_cast<const char*>(&len), major == 1 ? 2 : 4);
  h += dict;
  h.append(data_bytes, '\0');
  return bytes_of(h);
}

//! The message of the tool::error parse_npy throws (fails the test if none).
std::string parse_error(const std::vector<std::byte>& file) {
  try {
    (void)tool::parse_npy(file, "t.npy");
  } catch (const tool::error& e) {
    EXPECT_EQ(e.exit_code(), tool::exit_failure);
    return e.what();
  }
  ADD_FAILURE() << "parse_npy accepted a bad file";
  return {};
}

void expect_same(const tool::array& a, const tool::array& b) {
  EXPECT_EQ(a.type, b.type);
  EXPECT_EQ(a.shape, b.shape);
  ASSERT_EQ(a.size(), b.size());
  if (a.size() > 0) {
    EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * gc::dtype_size(a.type)), 0);
  }
}

}  // namespace

TEST(Npy, RoundTripsEveryDtypeShapeAndVersion) {
  const std::vector<std::vector<std::uint64_t>> shapes{{},  {1},    {17},      {3, 4, 5},
                                                       {0}, {0, 7}, {2, 0, 3}, {1, 1, 1, 1}};
  for (auto t : {gc::dtype::f32, gc::dtype::f16})
    for (const auto& shape : shapes)
      for (int version : {0, 1, 2, 3}) {
        SCOPED_TRACE(std::string(gc::dtype_name(t)) + " " + tool::shape_string(shape) + " v" +
                     std::to_string(version));
        const tool::array a = sample(t, shape);
        const auto file = tool::format_npy(a, version);
        EXPECT_EQ(static_cast<int>(file[6]), version == 0 ? 1 : version);
        const std::size_t preamble = version >= 2 ? 12 : 10;
        const std::size_t data_start = file.size() - a.size() * gc::dtype_size(t);
        EXPECT_EQ(data_start % 64, 0u) << "numpy aligns the data to 64 bytes";
        EXPECT_EQ(file[data_start - 1], std::byte{'\n'});
        EXPECT_GT(data_start, preamble);
        expect_same(tool::parse_npy(file, "t.npy"), a);
      }
}

TEST(Npy, WritesTheHeaderNumpyWrites) {
  const auto file = tool::format_npy(sample(gc::dtype::f32, {2, 3}));
  const std::string text(reinterpret_cast<const char*>(file.data()), 10 + 8 + 51);
  EXPECT_EQ(text.substr(0, 8), std::string("\x93NUMPY\x01\x00", 8));
  EXPECT_EQ(text.substr(10), "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }");
  const auto one = tool::format_npy(sample(gc::dtype::f16, {5}));
  EXPECT_NE(std::string(reinterpret_cast<const char*>(one.data()), one.size())
                .find("'<f2', 'fortran_order': False, 'shape': (5,), }"),
            std::string::npos);
}

TEST(Npy, ReadsHeadersInOtherStyles) {
  // Key order, double quotes, no trailing comma, Python 2 longs, no alignment padding.
  auto a = tool::parse_npy(
      handmade("{\"shape\": (2L, 3L), \"fortran_order\": False, \"descr\": \"<f4\"}\n", 24),
      "t.npy");
  EXPECT_EQ(a.type, gc::dtype::f32);
  EXPECT_EQ(a.shape, (std::vector<std::uint64_t>{2, 3}));
  auto b =
      tool::parse_npy(handmade("{'descr':'<f2','fortran_order':False,'shape':()}", 2, 2), "t.npy");
  EXPECT_EQ(b.type, gc::dtype::f16);
  EXPECT_TRUE(b.shape.empty());
  EXPECT_EQ(b.size(), 1u);
  auto c = tool::parse_npy(
      handmade("{'descr': '<f4', 'fortran_order': False, 'shape': ( 4 , ), }    \n", 16, 3),
      "t.npy");
  EXPECT_EQ(c.shape, (std::vector<std::uint64_t>{4}));
}

TEST(Npy, FileRoundTrip) {
  const auto dir =
      std::filesystem::temp_directory_path() / ("gradcodec_npy_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "a.npy").string();
  const tool::array a = sample(gc::dtype::f32, {8, 9});
  tool::write_npy(path, a);
  expect_same(tool::read_npy(path), a);
  try {
    (void)tool::read_npy((dir / "missing.npy").string());
    ADD_FAILURE() << "read a missing file";
  } catch (const tool::error& e) {
    EXPECT_NE(std::string(e.what()).find("No such file"), std::string::npos) << e.what();
  }
  std::filesystem::remove_all(dir);
}

TEST(Npy, RejectsBadFilesWithClearMessages) {
  const auto good = tool::format_npy(sample(gc::dtype::f32, {4}));
  struct bad_case {
    std::vector<std::byte> file;
    const char* needle;
  };
  const std::vector<bad_case> cases{
      {std::vector<std::byte>(good.begin(), good.begin() + 20), "truncated npy header"},
      {std::vector<std::byte>(good.begin(), good.begin() + 8), "truncated npy header"},
      {bytes_of("PK\x03\x04 this is a zip file"), "not a .npy file (bad magic)"},
      {{}, "bad magic"},
      {handmade("{'descr': '<f8', 'fortran_order': False, 'shape': (2,), }", 16),
       "unsupported npy dtype '<f8'"},
      {handmade("{'descr': '|u1', 'fortran_order': False, 'shape': (2,), }", 2),
       "unsupported npy dtype '|u1'"},
      {handmade("{'descr': '>f4', 'fortran_order': False, 'shape': (2,), }", 8),
       "unsupported npy dtype '>f4'"},
      {handmade("{'descr': '<f4', 'fortran_order': True, 'shape': (2, 2), }", 16),
       "fortran_order=True"},
      {handmade("{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (2,), }", 8),
       "structured dtypes"},
      {handmade("{'descr': '<f4', 'fortran_order': False, 'shape': (3,), }", 8),
       "truncated npy data"},
      {handmade("{'descr': '<f4', 'fortran_order': False, 'shape': (1,), }", 8),
       "4 unexpected bytes after"},
      {handmade("{'descr': '<f4', 'fortran_order': False}", 4), "lacks 'shape'"},
      {handmade("{'descr': '<f4', 'fortran_order': False, 'shape': (3), }", 12),
       "shape is not a tuple"},
      {handmade("{'descr': '<f4', 'fortran_order': False, 'shape': (-3,), }", 12),
       "negative dimension"},
      {handmade("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), 'x': 1}", 8),
       "unsupported value"},
      {handmade("{'descr': '<f4', 'fortran_order': False, 'shape': (1048576, 1048576, 1048576), }",
                0),
       "more than 2^48 elements"},
      {handmade("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), } x", 8),
       "unexpected text after"},
      {handmade("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }", 8, 4),
       "unsupported npy format version 4.0"},
  };
  for (const auto& c : cases) {
    const std::string msg = parse_error(c.file);
    EXPECT_NE(msg.find(c.needle), std::string::npos) << "want '" << c.needle << "' in: " << msg;
    EXPECT_EQ(msg.rfind("'t.npy': ", 0), 0u) << "the message names the file: " << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  }
}

TEST(Npy, RefusesToWriteBfloat16) {
  EXPECT_THROW((void)tool::format_npy(tool::array::zeros(gc::dtype::bf16, {2})), tool::error);
}
