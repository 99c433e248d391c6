// SPDX-License-Identifier: Apache-2.0
// The gradcodec command-line tool, run as a separate process on files in a temp dir:
// encode/decode/inspect round trips checked against the library called in-process, eval
// and list output, and one clean error line with the right exit code for bad input.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "gcdc_file.hpp"
#include "gradcodec/blocks/float16.hpp"
#include "gradcodec/gradcodec.hpp"
#include "npy.hpp"
#include "support/tool_process.hpp"

namespace gc = gradcodec;
namespace tool = gradcodec::tool;
namespace fs = std::filesystem;

namespace {

using gc::test::lines_of;
using gc::test::quote;
using gc::test::run_result;
using gc::test::slurp;
using gc::test::words_of;

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

void write_bytes(const std::string& path, const std::vector<std::byte>& bytes) {
  write_bytes(path, std::string(reinterpret_cast<const char*>(bytes.data()), bytes.size()));
}

//! A deterministic array with a spread of magnitudes, a few zeros and a -0.0.
tool::array sample(gc::dtype t, std::vector<std::uint64_t> shape, std::uint32_t seed = 1) {
  tool::array a = tool::array::zeros(t, std::move(shape));
  std::uint32_t state = seed;
  for (std::uint64_t i = 0; i < a.size(); ++i) {
    state = state * 1664525u + 1013904223u;
    float v = static_cast<float>(static_cast<std::int32_t>(state)) * 0x1p-31f;
    if (i % 17 == 3) v = 0.0f;
    if (i % 29 == 5) v = -0.0f;
    if (t == gc::dtype::f32)
      a.f32[i] = v;
    else
      a.half[i] = gc::blocks::f32_to_f16(v);
  }
  return a;
}

//! An npy file with a hand-written header dictionary (format 1.0).
std::string npy_with_header(const std::string& dict, std::size_t data_bytes) {
  std::string h = std::string("\x93NUMPY\x01\x00", 8);
  const auto len = static_cast<std::uint16_t>(dict.size());
  h.append(reinterpret_cast<const char*>(&len), 2);
  return h + dict + std::string(data_bytes, '\0');
}

class Cli : public gc::test::tool_test {};

void expect_ok(const run_result& r, const std::string& what) {
  EXPECT_EQ(r.code, 0) << what << "\nstderr: " << r.err;
  EXPECT_EQ(r.err, "") << what;
}

//! Exactly one stderr line "gradcodec: error: ..." holding `needle`, and the exit code.
void expect_error(const run_result& r, int code, const std::string& needle,
                  const std::string& what) {
  EXPECT_EQ(r.code, code) << what << "\nstderr: " << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << what << "\nstderr: " << r.err;
  EXPECT_EQ(r.err.rfind("gradcodec: error: ", 0), 0u) << what << "\nstderr: " << r.err;
  EXPECT_NE(r.err.find(needle), std::string::npos)
      << what << ": want '" << needle << "' in: " << r.err;
}

}  // namespace

TEST_F(Cli, EncodeDecodeInspectMatchTheLibrary) {
  const std::vector<std::string> specs{"fp16",
                                       "bf16",
                                       "topk:ratio=0.1",
                                       "dgc:ratio=0.1",
                                       "randomk:ratio=0.2,unbiased=1",
                                       "threshold:tau=0.5",
                                       "qsgd:levels=7,bucket=64",
                                       "terngrad:clip=2.5",
                                       "minmax:bits=3,bucket=32,rounding=stochastic",
                                       "onebit:bucket=16",
                                       "sign:scale=mean,bucket=16",
                                       "powersgd:rank=2"};
  struct shape_case {
    gc::dtype type;
    std::vector<std::uint64_t> shape;
  };
  const std::vector<shape_case> shapes{{gc::dtype::f32, {12, 20}},
                                       {gc::dtype::f16, {3, 4, 5}},
                                       {gc::dtype::f32, {100}},
                                       {gc::dtype::f32, {}},
                                       {gc::dtype::f32, {0, 5}}};
  const gc::context ctx{7, 3, 2};
  const std::string in = path("in.npy"), enc = path("x.gcdc"), dec = path("y.npy");
  for (const auto& sc : shapes) {
    const tool::array a = sample(sc.type, sc.shape);
    tool::write_npy(in, a);
    for (const auto& text : specs) {
      const std::string what =
          text + " on " + tool::shape_string(sc.shape) + " " + std::string(gc::dtype_name(sc.type));
      SCOPED_TRACE(what);
      const auto spec = gc::parse_spec(text);
      ASSERT_TRUE(spec.ok()) << spec.error().message();
      expect_ok(run("encode --codec " + quote(text) + " --seed 7 --step 3 --tensor-id 2 " +
                    quote(in) + " " + quote(enc)),
                "encode");

      // The file's frame is the library's frame, byte for byte, and the shape follows it.
      const tool::gcdc_file f = tool::read_gcdc(enc);
      EXPECT_TRUE(f.has_trailer);
      EXPECT_EQ(f.shape, sc.shape);
      std::vector<std::byte> want(gc::encode_bound(spec.value(), a.size(), a.type, a.rows()));
      auto ws = gc::workspace_size(spec.value(), a.view(), gc::operation::encode);
      ASSERT_TRUE(ws.ok()) << ws.error().message();
      std::vector<std::byte> scratch(ws.value());
      gc::exec_options opt;
      opt.workspace = scratch;
      auto written = gc::encode(spec.value(), ctx, a.view(), want, opt);
      ASSERT_TRUE(written.ok()) << written.error().message();
      ASSERT_EQ(f.frame().size(), written.value());
      EXPECT_EQ(std::memcmp(f.frame().data(), want.data(), written.value()), 0);

      // Decoded values equal gradcodec::decode's, in the input's dtype and shape.
      expect_ok(run("decode " + quote(enc) + " " + quote(dec)), "decode");
      const tool::array y = tool::read_npy(dec);
      EXPECT_EQ(y.type, a.type);
      EXPECT_EQ(y.shape, sc.shape);
      tool::array ref = tool::array::zeros(a.type, sc.shape);
      gc::tensor_view out = ref.mutable_view();
      if (f.header.codec == gc::codec_id::powersgd) out.rows = f.header.count;
      auto dws = gc::workspace_size(gc::spec_of(f.header), out, gc::operation::decode);
      ASSERT_TRUE(dws.ok()) << dws.error().message();
      std::vector<std::byte> dscratch(dws.value());
      opt.workspace = dscratch;
      const gc::status st = gc::decode(f.frame(), out, opt);
      ASSERT_TRUE(st.ok()) << st.message();
      ASSERT_EQ(y.size(), ref.size());
      if (y.size() > 0) {
        EXPECT_EQ(std::memcmp(y.data(), ref.data(), y.size() * gc::dtype_size(y.type)), 0);
      }

      const run_result r = run("inspect " + quote(enc));
      expect_ok(r, "inspect");
      EXPECT_NE(r.out.find("spec               " + gc::to_string(gc::spec_of(f.header)) + "\n"),
                std::string::npos)
          << r.out;
      EXPECT_NE(r.out.find("shape              " + tool::shape_string(sc.shape) + "\n"),
                std::string::npos)
          << r.out;
      EXPECT_NE(r.out.find("n                  " + std::to_string(a.size()) + "\n"),
                std::string::npos)
          << r.out;
      EXPECT_NE(r.out.find("frame_bytes        " + std::to_string(written.value()) + "\n"),
                std::string::npos)
          << r.out;
      for (const char* key :
           {"magic", "version", "codec", "dtype", "flags", "payload_bytes", "count", "group",
            "level", "mode", "param", "check", "bits_per_element", "compression_ratio"})
        EXPECT_NE(r.out.find(std::string("\n") + key + " "), std::string::npos) << key;
    }
  }
}

TEST_F(Cli, RawInputAndFramesWithoutTrailer) {
  const tool::array a = sample(gc::dtype::f32, {6, 10});
  write_bytes(path("raw.f32"),
              std::string(reinterpret_cast<const char*>(a.f32.data()), a.size() * 4));
  expect_ok(run("encode --codec powersgd:rank=1 --dtype f32 --rows 6 " + quote(path("raw.f32")) +
                " " + quote(path("r.gcdc"))),
            "raw encode");
  const tool::gcdc_file f = tool::read_gcdc(path("r.gcdc"));
  EXPECT_EQ(f.shape, (std::vector<std::uint64_t>{60}));
  EXPECT_EQ(f.header.count, 6u) << "--rows reached PowerSGD";

  // A bare frame (no trailer) decodes as a 1-D array.
  write_bytes(path("bare.gcdc"), std::vector<std::byte>(f.frame().begin(), f.frame().end()));
  expect_ok(run("decode " + quote(path("bare.gcdc")) + " " + quote(path("bare.npy"))),
            "bare decode");
  EXPECT_EQ(tool::read_npy(path("bare.npy")).shape, (std::vector<std::uint64_t>{60}));
  const run_result r = run("inspect --verify " + quote(path("bare.gcdc")));
  expect_ok(r, "inspect bare");
  EXPECT_NE(r.out.find("no shape trailer"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("verify             ok"), std::string::npos) << r.out;
}

TEST_F(Cli, EvalPrintsOneRowPerCodec) {
  const tool::array a = sample(gc::dtype::f32, {64, 48}, 9);
  tool::write_npy(path("g.npy"), a);
  const run_result r = run("eval --input " + quote(path("g.npy")) +
                           " --codecs fp16,qsgd:levels=7,bucket=64 --repeat 2 --seed 5");
  expect_ok(r, "eval");
  const auto lines = lines_of(r.out);
  const auto header = std::find_if(lines.begin(), lines.end(),
                                   [](const std::string& l) { return l.rfind("codec ", 0) == 0; });
  ASSERT_NE(header, lines.end()) << r.out;
  EXPECT_EQ(words_of(*header), (std::vector<std::string>{"codec", "bits/elem", "ratio",
                                                         "rel_l2_err", "enc_GB/s", "dec_GB/s"}));
  const std::vector<std::string> want_rows{"fp16",
                                           "qsgd:levels=7,bucket=64,norm=max,rounding=stochastic"};
  ASSERT_EQ(lines.end() - header, 3) << r.out;
  for (std::size_t i = 0; i < want_rows.size(); ++i) {
    const auto w = words_of(header[static_cast<std::ptrdiff_t>(i) + 1]);
    ASSERT_EQ(w.size(), 6u) << header[static_cast<std::ptrdiff_t>(i) + 1];
    EXPECT_EQ(w[0], want_rows[i]);
    // Bits per element and ratio from the frame size the library produces (seed 5, tensor 0).
    const auto spec = gc::parse_spec(want_rows[i]).value();
    std::vector<std::byte> buf(gc::encode_bound(spec, a.size(), a.type, a.rows()));
    auto ws = gc::workspace_size(spec, a.view(), gc::operation::encode);
    ASSERT_TRUE(ws.ok());
    std::vector<std::byte> scratch(ws.value());
    gc::exec_options opt;
    opt.workspace = scratch;
    auto n = gc::encode(spec, {5, 0, 0}, a.view(), buf, opt);
    ASSERT_TRUE(n.ok()) << n.error().message();
    char bits[32], ratio[32];
    std::snprintf(bits, sizeof bits, "%.4g",
                  8.0 * static_cast<double>(n.value()) / static_cast<double>(a.size()));
    std::snprintf(ratio, sizeof ratio, "%.4g",
                  static_cast<double>(a.size() * 4) / static_cast<double>(n.value()));
    EXPECT_EQ(w[1], bits);
    EXPECT_EQ(w[2], ratio);
    const double err = std::stod(w[3]);
    EXPECT_TRUE(err > 0.0 && err < (i == 0 ? 1e-3 : 1.0)) << w[3];
    EXPECT_GT(std::stod(w[4]), 0.0);
    EXPECT_GT(std::stod(w[5]), 0.0);
  }
}

TEST_F(Cli, EvalReportsAFailingCodecInItsRowAndFails) {
  tool::array a = sample(gc::dtype::f32, {100});
  a.f32[10] = std::nanf("");
  tool::write_npy(path("nan.npy"), a);
  const run_result r = run("eval --input " + quote(path("nan.npy")) +
                           " --codecs fp16 --codecs fp16:nonfinite=error --repeat 1");
  expect_error(r, 1, "1 of 2 codecs failed", "eval with a failing codec");
  EXPECT_NE(r.out.find("\nfp16 "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("fp16:nonfinite=error  error: "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("nonfinite_input"), std::string::npos) << r.out;
}

TEST_F(Cli, ListMentionsEveryCodecAndParameter) {
  const run_result r = run("list");
  expect_ok(r, "list");
  for (const auto& c : gc::all_codecs()) {
    EXPECT_NE(r.out.find("\n" + std::string(c.name) + " - " + std::string(c.summary) + "\n"),
              std::string::npos)
        << c.name;
    EXPECT_NE(r.out.find(std::string(c.bits_per_element)), std::string::npos) << c.name;
    for (const auto& p : c.params)
      EXPECT_NE(r.out.find(std::string(p.doc)), std::string::npos) << c.name << " " << p.key;
    const auto b = gc::bounds(gc::make_spec(c.id));
    EXPECT_NE(r.out.find(std::string("error feedback: ") + (b.feedback_safe ? "safe" : "unsafe") +
                         " - " + std::string(b.reason)),
              std::string::npos)
        << c.name;
  }
}

// A backend that is missing says why: not built, or the CUDA runtime's own error (a driver
// older than the runtime is not "no GPU"), in `list` and in the error of a call.
TEST_F(Cli, ListSaysWhyABackendIsMissing) {
  EXPECT_EQ(gc::backend_unavailable_reason(gc::backend::reference), "");
  const run_result r = run("list");
  expect_ok(r, "list");
  for (gc::backend b : {gc::backend::cpu, gc::backend::cuda}) {
    const std::string why(gc::backend_unavailable_reason(b));
    EXPECT_EQ(why.empty(), gc::backend_available(b)) << gc::backend_name(b);
    const std::string line = "\n  " + std::string(gc::backend_name(b)) + ": " + why + "\n";
    EXPECT_EQ(r.out.find(line) != std::string::npos, !why.empty()) << line << r.out;
  }
  if (!gc::backend_available(gc::backend::cuda)) {
    const std::string why(gc::backend_unavailable_reason(gc::backend::cuda));
    // Built with CUDA: what the runtime said (its error name), else "not built".
    EXPECT_TRUE(why.find("cudaError") != std::string::npos ||
                why.find("0 devices") != std::string::npos || why.rfind("not built", 0) == 0)
        << why;
    const run_result e = run("list --backend cuda");
    EXPECT_NE(e.err.find(why), std::string::npos) << e.err;
  }
}

TEST_F(Cli, HelpPrintsUsage) {
  for (const std::string args : {"--help", "-h", "help"}) {
    const run_result r = run(args);
    expect_ok(r, args);
    EXPECT_EQ(r.out.rfind("usage: gradcodec <command>", 0), 0u) << r.out;
    // Each command: its name, at least two spaces, and one whole sentence on that line.
    for (const char* cmd :
         {"encode", "decode", "inspect", "eval", "list", "bench", "plan", "calibrate"}) {
      const std::size_t at = r.out.find(std::string("\n  ") + cmd + "  ");
      ASSERT_NE(at, std::string::npos) << cmd << "\n" << r.out;
      const std::string line = r.out.substr(at + 1, r.out.find('\n', at + 1) - at - 1);
      EXPECT_LE(line.size(), 88u) << line;
      EXPECT_EQ(line.back(), '.') << line;
    }
  }
  for (const std::string cmd : {"encode", "decode", "inspect", "eval", "list"}) {
    const run_result r = run(cmd + " --help");
    expect_ok(r, cmd);
    EXPECT_EQ(r.out.rfind("usage: gradcodec " + cmd, 0), 0u) << r.out;
    EXPECT_NE(r.out.find("--backend B"), std::string::npos) << r.out;
  }
}

TEST_F(Cli, BadInputGivesOneErrorLineAndAnExitCode) {
  const tool::array a = sample(gc::dtype::f32, {12, 20});
  tool::write_npy(path("good.npy"), a);
  write_bytes(path("f8.npy"),
              npy_with_header("{'descr': '<f8', 'fortran_order': False, 'shape': (2,), }\n", 16));
  write_bytes(path("u1.npy"),
              npy_with_header("{'descr': '|u1', 'fortran_order': False, 'shape': (2,), }\n", 2));
  write_bytes(path("fortran.npy"),
              npy_with_header("{'descr': '<f4', 'fortran_order': True, 'shape': (2, 2), }\n", 16));
  write_bytes(path("garbage.npy"), std::string("this is not an npy file at all"));
  const auto good_npy = tool::format_npy(a);
  write_bytes(path("trunc.npy"), std::vector<std::byte>(good_npy.begin(), good_npy.begin() + 30));
  write_bytes(path("odd.bin"), std::string(7, '\0'));

  ASSERT_EQ(
      run("encode --codec qsgd " + quote(path("good.npy")) + " " + quote(path("good.gcdc"))).code,
      0);
  const tool::gcdc_file f = tool::read_gcdc(path("good.gcdc"));
  std::vector<std::byte> frame(f.frame().begin(), f.frame().end());
  auto corrupt = f.bytes;
  corrupt[20] ^= std::byte{0x40};  // payload_bytes: caught by the header checksum
  write_bytes(path("corrupt.gcdc"), corrupt);
  write_bytes(path("truncated.gcdc"), std::vector<std::byte>(frame.begin(), frame.end() - 1));
  auto bad_trailer = f.bytes;
  bad_trailer[frame.size() + 9] ^= std::byte{1};
  write_bytes(path("badtrailer.gcdc"), bad_trailer);
  auto wrong_shape = frame;
  const auto t = tool::shape_trailer(std::vector<std::uint64_t>{7, 3});
  wrong_shape.insert(wrong_shape.end(), t.begin(), t.end());
  write_bytes(path("wrongshape.gcdc"), wrong_shape);

  const std::string good = quote(path("good.npy"));
  const std::string out_gcdc = quote(path("o.gcdc"));
  const std::string out_npy = quote(path("o.npy"));
  const std::string nowhere = "/nonexistent-gradcodec-dir/";
  struct bad_case {
    std::string args;
    int code;
    std::string needle;
  };
  std::vector<bad_case> cases{
      {"encode --codec fp16 " + quote(path("missing.npy")) + " " + out_gcdc, 1,
       "No such file or directory"},
      {"encode --codec fp16 " + quote(path("f8.npy")) + " " + out_gcdc, 1,
       "unsupported npy dtype '<f8'"},
      {"encode --codec fp16 " + quote(path("u1.npy")) + " " + out_gcdc, 1,
       "unsupported npy dtype '|u1'"},
      {"encode --codec fp16 " + quote(path("garbage.npy")) + " " + out_gcdc, 1, "bad magic"},
      {"encode --codec fp16 " + quote(path("fortran.npy")) + " " + out_gcdc, 1, "fortran_order"},
      {"encode --codec fp16 " + quote(path("trunc.npy")) + " " + out_gcdc, 1, "truncated"},
      {"encode --codec fp16 " + quote(dir_.string()) + " " + out_gcdc, 1, "Is a directory"},
      {"decode " + quote(path("corrupt.gcdc")) + " " + out_npy, 1, "checksum"},
      {"inspect " + quote(path("corrupt.gcdc")), 1, "checksum"},
      {"decode " + quote(path("truncated.gcdc")) + " " + out_npy, 1, "truncated"},
      {"inspect " + quote(path("truncated.gcdc")), 1, "truncated"},
      {"decode " + quote(path("badtrailer.gcdc")) + " " + out_npy, 1, "shape trailer"},
      {"decode " + quote(path("wrongshape.gcdc")) + " " + out_npy, 1, "does not hold"},
      {"decode " + good + " " + out_npy, 1, "not a valid gradcodec frame"},
      {"encode --codec topk:ratio=2 " + good + " " + out_gcdc, 2, "ratio must be in (0, 1]"},
      {"encode --codec nosuch " + good + " " + out_gcdc, 2, "unknown codec 'nosuch'"},
      {"encode --codec fp16 --frobnicate " + good + " " + out_gcdc, 2,
       "unknown option '--frobnicate'"},
      {"decode --codec fp16 " + quote(path("good.gcdc")) + " " + out_npy, 2,
       "unknown option '--codec'"},
      {"encode --codec fp16 " + good, 2, "expected 2 arguments"},
      {"encode --codec fp16 " + good + " " + out_gcdc + " extra", 2, "'extra' is extra"},
      {"inspect", 2, "expected 1 argument"},
      {"encode " + good + " " + out_gcdc, 2, "missing required option --codec"},
      {"encode " + good + " " + out_gcdc + " --codec", 2, "needs a value"},
      {"encode --codec fp16 --seed x " + good + " " + out_gcdc, 2,
       "--seed: expected an unsigned integer"},
      {"frobnicate", 2, "unknown command 'frobnicate'"},
      {"", 2, "missing command"},
      {"-x", 2, "unknown option '-x'"},
      {"encode --codec fp16 " + good + " " + quote(nowhere + "o.gcdc"), 1, "cannot create"},
      {"decode " + quote(path("good.gcdc")) + " " + quote(nowhere + "o.npy"), 1, "cannot create"},
      {"list --backend warp", 2, "unknown backend 'warp'"},
      {"encode --codec fp16 --dtype f64 " + quote(path("odd.bin")) + " " + out_gcdc, 2,
       "unknown raw dtype 'f64'"},
      {"encode --codec fp16 --dtype f32 " + quote(path("odd.bin")) + " " + out_gcdc, 1,
       "not a whole number"},
      {"encode --codec powersgd --rows 7 " + good + " " + out_gcdc, 1, "--rows 7 does not divide"},
      {"eval --input " + good + " --codecs fp16,nosuch", 2, "unknown codec 'nosuch'"},
      {"eval --input " + good + " --codecs bucket=4", 2, "does not follow a codec name"},
      {"eval --repeat 0", 2, "--repeat"},
  };
  if (!gc::backend_available(gc::backend::cuda)) {
    cases.push_back({"list --backend cuda", 1, "backend 'cuda' is not available"});
    cases.push_back(
        {"encode --backend cuda --codec fp16 " + good + " " + out_gcdc, 1, "not available"});
  }
  for (const auto& c : cases) expect_error(run(c.args), c.code, c.needle, "gradcodec " + c.args);
  EXPECT_FALSE(fs::exists(path("o.gcdc"))) << "a failed command wrote its output";
  EXPECT_FALSE(fs::exists(path("o.npy"))) << "a failed command wrote its output";
}

namespace {

//! A cost profile's JSON text with 1 ns per element per operation for every spec given,
//! over a 1 Gbit/s link, and with intra_link (100 Gbit/s) when asked.
std::string hand_profile(const std::vector<std::string>& specs, bool intra) {
  const std::string rate = R"({"step_latency_s": 5e-05, "bytes_per_s": 125000000})";
  const std::string fast = R"({"step_latency_s": 5e-06, "bytes_per_s": 12500000000})";
  const auto link = [](const std::string& k) {
    return R"({"allgather": )" + k + R"(, "alltoall": )" + k + R"(, "allreduce": )" + k +
           R"(, "overlap": 0, "burst_bytes": 0})";
  };
  const std::string op = R"({"fixed_s": 1e-05, "per_element_s": 1e-09})";
  std::string codecs;
  for (const std::string& spec : specs)
    codecs += (codecs.empty() ? "" : ", ") + std::string(R"({"spec": ")") + spec +
              R"(", "encode": )" + op + R"(, "encode_with_feedback": )" + op + R"(, "decode": )" +
              op + R"(, "decode_accumulate": )" + op + R"(, "frame_bytes_per_element": 0})";
  return R"({"format": "gradcodec-cost-profile", "version": 1, "ranks": 4, "link": )" + link(rate) +
         (intra ? R"(, "intra_link": )" + link(fast) : std::string()) +
         R"(, "copy": {"fixed_s": 1e-06, "per_element_s": 2.5e-10}, "codecs": [)" + codecs + "]}\n";
}

}  // namespace

// plan --ranks-per-node predicts hierarchical calls from a profile with an intra-node link,
// and refuses one without, naming what is missing.
TEST_F(Cli, PlanPredictsHierarchicalCallsFromATwoLevelProfile) {
  write_bytes(path("two_level.json"), hand_profile({"minmax:bits=4", "bf16"}, true));
  write_bytes(path("flat.json"), hand_profile({"minmax:bits=4", "bf16"}, false));
  const std::string args = "plan --size 2^20 --ranks 4 --ranks-per-node 2 --codecs minmax:bits=4 ";
  const run_result r = run(args + "--profile " + quote(path("two_level.json")));
  expect_ok(r, "two-level profile");
  EXPECT_NE(r.out.find("4 ranks (2 nodes of 2, hierarchical)"), std::string::npos) << r.out;
  expect_error(run(args + "--profile " + quote(path("flat.json"))), 1, "intra-node link",
               "flat profile");
  expect_error(run("plan --size 2^20 --ranks 4 --ranks-per-node 3 --profile " +
                   quote(path("two_level.json"))),
               2, "--ranks-per-node", "a layout that does not divide the ranks");
}

// plan --tensors: PowerSGD predicted on the matrices given (the bench's model layout or
// ROWSxCOLS items), and a clear usage error for items it cannot read.
TEST_F(Cli, PlanTakesPowerSgdTensors) {
  write_bytes(path("psgd.json"), hand_profile({"powersgd:rank=4", "bf16"}, false));
  const std::string base = "plan --size 2^20 --ranks 2 --codecs powersgd:rank=4 --json --profile " +
                           quote(path("psgd.json")) + " ";
  const auto wire = [&](const std::string& extra) {
    const run_result r = run(base + extra);
    expect_ok(r, extra);
    const std::size_t at = r.out.find("\"spec\": \"powersgd");
    const std::size_t w = r.out.find("\"wire_bytes\": ", at);
    return at == std::string::npos || w == std::string::npos
               ? std::string("(none)")
               : r.out.substr(w, r.out.find(',', w) - w);
  };
  const std::string square = wire(""), model = wire("--tensors model");
  const std::string same_square = wire("--tensors 1024x1024");
  EXPECT_EQ(square, same_square);  // 2^20 = 1024 x 1024, the near-square matrix
  EXPECT_NE(square, model);
  EXPECT_NE(square, wire("--tensors 256x1024,64x64"));
  for (const char* bad : {"--tensors 12", "--tensors 0x8", "--tensors 2048x1024", "--tensors ax3"})
    expect_error(run(base + bad), 2, "--tensors", bad);
}
