// SPDX-License-Identifier: Apache-2.0
// gradcodec bench, run as a separate process at small sizes: the table has a row per
// measurement, the JSON has every required field with sane values, baselines are present,
// and bad options give one error line with exit code 2.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "gradcodec/gradcodec.hpp"
#include "support/tool_process.hpp"

namespace fs = std::filesystem;

namespace {

using gradcodec::test::lines_of;
using gradcodec::test::quote;
using gradcodec::test::run_result;
using gradcodec::test::slurp;
using gradcodec::test::words_of;

//! One JSON record, flat: key -> raw value text (strings without their quotes). The tool
//! writes one record per line, so a line-based reader is enough here.
using flat_record = std::map<std::string, std::string>;

flat_record parse_record(const std::string& line) {
  flat_record r;
  std::size_t i = line.find('{');
  while (i != std::string::npos) {
    const auto k0 = line.find('"', i);
    if (k0 == std::string::npos) break;
    const auto k1 = line.find('"', k0 + 1);
    const std::string key = line.substr(k0 + 1, k1 - k0 - 1);
    auto v0 = line.find(':', k1) + 1;
    while (line[v0] == ' ') ++v0;
    std::size_t v1;
    std::string value;
    if (line[v0] == '"') {
      v1 = line.find('"', v0 + 1);
      value = line.substr(v0 + 1, v1 - v0 - 1);
      ++v1;
    } else {
      v1 = line.find_first_of(",}", v0);
      value = line.substr(v0, v1 - v0);
    }
    r[key] = value;
    i = line.find(',', v1);
  }
  return r;
}

class Bench : public gradcodec::test::tool_test {};

TEST_F(Bench, TableAndJsonHaveEveryMeasurement) {
  const std::string json = path("b.json");
  const run_result r =
      run("bench --sizes 4096,2^13 --codecs topk:ratio=0.01,minmax:bits=4,fp16 --backend reference "
          "--json " +
          quote(json));
  ASSERT_EQ(r.code, 0) << r.err << r.out;
  EXPECT_EQ(r.err, "");

  // Table: for each size, 5 baseline rows and 3 codecs x 4 ops on the reference.
  const std::set<std::string> ops{"encode", "decode", "decode_accumulate", "encode_ef"};
  std::map<std::string, int> codec_rows, baseline_rows;
  for (const auto& line : lines_of(r.out)) {
    const auto w = words_of(line);
    if (w.size() != 10) continue;
    if (w[1] == "reference" && ops.count(w[4]) == 1) {
      ++codec_rows[w[0] + " " + w[4]];
      EXPECT_EQ(w[2], "-") << line;
      EXPECT_GT(std::stod(w[6]), 0.0) << line;  // GB/s
    }
    if (w[1] == "baseline") ++baseline_rows[w[4]];
  }
  EXPECT_EQ(codec_rows.size(), 12u);
  for (const auto& [k, count] : codec_rows) EXPECT_EQ(count, 2) << k;
  for (const char* b : {"memcpy", "sum", "nth_element_topk", "heap_topk", "cgx_minmax4"})
    EXPECT_EQ(baseline_rows[b], 2) << b;

  // JSON: one record per line between "records" and "notes".
  const auto text = lines_of(slurp(json));
  std::vector<flat_record> records;
  bool in_records = false;
  for (const auto& line : text) {
    if (line.find("\"records\"") != std::string::npos) in_records = true;
    if (line.find("\"notes\"") != std::string::npos) in_records = false;
    if (in_records && line.find("{\"codec\"") != std::string::npos)
      records.push_back(parse_record(line));
  }
  ASSERT_EQ(records.size(), 2u * (5 + 12));
  std::size_t fp16_encode = 0;
  for (const auto& rec : records) {
    for (const char* key : {"codec", "backend", "isa", "threads", "n", "op", "median_s", "gbps",
                            "roofline_share", "ratio", "rel_error"})
      EXPECT_EQ(rec.count(key), 1u) << key;
    const std::string n = rec.at("n");
    EXPECT_TRUE(n == "4096" || n == "8192") << n;
    EXPECT_GT(std::stod(rec.at("median_s")), 0.0);
    EXPECT_GT(std::stod(rec.at("gbps")), 0.0);
    const double share = std::stod(rec.at("roofline_share"));
    EXPECT_GT(share, 0.0);
    EXPECT_GE(std::stod(rec.at("rel_error")), 0.0);
    if (rec.at("op") == "memcpy") {
      EXPECT_DOUBLE_EQ(share, 1.0);
    }
    if (rec.at("codec") == "fp16" && rec.at("op") == "encode") {
      ++fp16_encode;
      // fp16: 2 bytes per element plus a header, and rounding error below 2^-11.
      const double ratio = std::stod(rec.at("ratio"));
      EXPECT_GT(ratio, 1.9);
      EXPECT_LT(ratio, 2.0);
      EXPECT_LT(std::stod(rec.at("rel_error")), 0x1p-11);
      EXPECT_EQ(rec.at("backend"), "reference");
    }
  }
  EXPECT_EQ(fp16_encode, 2u);
}

TEST_F(Bench, CpuBackendRowsPerIsaAndNotesInsteadOfFailures) {
  // The library's choice: sanitizer builds leave out the scalar variant.
  const std::string isa(gradcodec::cpu_isa_name(gradcodec::cpu_isa_best()));
  const run_result r = run("bench --sizes 4096 --codecs fp16,powersgd --backend cpu --isa " + isa);
  if (r.code == 1 && r.err.find("not available") != std::string::npos)
    GTEST_SKIP() << "no CPU backend in this build";
  ASSERT_EQ(r.code, 0) << r.err << r.out;
  std::size_t rows = 0;
  for (const auto& line : lines_of(r.out)) {
    const auto w = words_of(line);
    if (w.size() >= 5 && w[1] == "cpu") {
      ++rows;
      EXPECT_EQ(w[2], isa) << line;
      // Either measured (10 columns) or a note naming what is missing.
      if (w.size() != 10) {
        EXPECT_NE(line.find("not implemented"), std::string::npos) << line;
      }
    }
  }
  EXPECT_EQ(rows, 8u);
}

TEST_F(Bench, ErrorFeedbackRowsCountTheFramesTheyWrote) {
  // The residual carries over between encode_ef runs, so threshold's frames grow (the small
  // values cross tau once accumulated) while top-k's stay k entries: the encode_ef row's
  // ratio and bytes model follow the frames actually written.
  const run_result r =
      run("bench --sizes 2^13 --codecs threshold:tau=0.002,topk:ratio=0.01 --backend reference "
          "--repeat 5");
  ASSERT_EQ(r.code, 0) << r.err << r.out;
  std::map<std::string, double> ratio;
  for (const auto& line : lines_of(r.out)) {
    const auto w = words_of(line);
    if (w.size() == 10 && w[1] == "reference") ratio[w[0] + " " + w[4]] = std::stod(w[8]);
  }
  const std::string thr = "threshold:tau=0.002 ", topk = "topk:ratio=0.01 ";
  ASSERT_EQ(ratio.count(thr + "encode_ef"), 1u) << r.out;
  ASSERT_EQ(ratio.count(topk + "encode_ef"), 1u) << r.out;
  EXPECT_LT(ratio[thr + "encode_ef"], 0.9 * ratio[thr + "encode"]) << r.out;
  EXPECT_DOUBLE_EQ(ratio[topk + "encode_ef"], ratio[topk + "encode"]) << r.out;
}

TEST_F(Bench, VerifyChecksEveryMeasuredConfigurationAgainstTheReference) {
  // Every ISA of the CPU backend, three codec families, an odd size: frames, decoded values
  // and one error-feedback step equal the reference's (a backend that differed would fail
  // the run with a "verify:" line naming the first differing byte).
  const run_result r = run(
      "bench --sizes 4097 --codecs fp16,minmax:bits=4,topk,sign --backend cpu --repeat 5 --verify");
  // A build none of whose CPU variants (GRADCODEC_CPU_ISAS) this machine runs has no CPU
  // backend: then the run is one clear error instead of a verification.
  if (!gradcodec::backend_available(gradcodec::backend::cpu)) {
    EXPECT_EQ(r.code, 1) << r.err << r.out;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_NE(r.err.find("cpu"), std::string::npos) << r.err;
    return;
  }
  ASSERT_EQ(r.code, 0) << r.err << r.out;
  std::size_t isas = 0;
  for (const char* isa : {"scalar", "avx2", "avx512"})
    isas += gradcodec::cpu_isa_supported(gradcodec::cpu_isa_from_name(isa).value()) ? 1 : 0;
  EXPECT_NE(r.out.find("verify: " + std::to_string(4 * isas) +
                       " measured configurations equal the reference backend bit for bit"),
            std::string::npos)
      << r.out;
}

TEST_F(Bench, BadOptionsAreUsageErrors) {
  for (const std::string args :
       {"bench --sizes 0", "bench --sizes 2^x", "bench --codecs nosuch", "bench --repeat 2",
        "bench --backend nosuch", "bench --isa nosuch", "bench --sizes 1,,2",
        "bench --backend cuda,cpu", "bench --gpu 0", "bench --backend cuda --isa avx2",
        "bench --allreduce --verify", "bench --backend cuda --verify"}) {
    const run_result r = run(args);
    EXPECT_EQ(r.code, 2) << args << "\n" << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << args << "\n" << r.err;
    EXPECT_EQ(r.err.rfind("gradcodec: error: ", 0), 0u) << args << "\n" << r.err;
  }
}

TEST_F(Bench, CudaBackendWithoutADeviceIsOneClearError) {
  if (gradcodec::backend_available(gradcodec::backend::cuda))
    GTEST_SKIP() << "a CUDA device is visible: scripts/gpu-check runs the GPU benchmark";
  const run_result r = run("bench --backend cuda --sizes 1024 --codecs qsgd");
  EXPECT_EQ(r.code, 1) << r.err;
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_TRUE(r.err.find("cuda") != std::string::npos) << r.err;
}

}  // namespace
