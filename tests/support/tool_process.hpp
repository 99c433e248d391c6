// SPDX-License-Identifier: Apache-2.0
//! @file
//! Tests that run the gradcodec tool as a separate process: a fixture with a private temp
//! directory, the run (stdout and stderr captured in files, exit code decoded), and small
//! text helpers for its output. GRADCODEC_TOOL_PATH names the built tool.
#pragma once

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <system_error>
#include <vector>

#ifndef GRADCODEC_TOOL_PATH
#error "GRADCODEC_TOOL_PATH must name the built gradcodec tool"
#endif

namespace gradcodec::test {

struct run_result {
  int code = -1;  //!< exit code; -1 when killed by a signal (a crash)
  std::string out;
  std::string err;
};

inline std::string quote(const std::string& s) {
  return "'" + s + "'";
}  // temp paths hold no quotes

inline std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

inline std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

inline std::vector<std::string> words_of(const std::string& line) {
  std::vector<std::string> out;
  std::istringstream in(line);
  for (std::string w; in >> w;) out.push_back(w);
  return out;
}

//! A test fixture with its own empty directory under the system temp dir, removed after.
class tool_test : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = std::filesystem::temp_directory_path() /
           ("gradcodec_" + std::string(info->test_suite_name()) + "_" + std::to_string(::getpid()) +
            "_" + info->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }

  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  //! Runs the tool with a shell-quoted argument string, capturing stdout and stderr.
  run_result run(const std::string& args) const {
    const std::string out = path("stdout.txt");
    const std::string err = path("stderr.txt");
    const std::string cmd =
        quote(GRADCODEC_TOOL_PATH) + " " + args + " > " + quote(out) + " 2> " + quote(err);
    const int status = std::system(cmd.c_str());
    run_result r;
    r.code = (status != -1 && WIFEXITED(status)) ? WEXITSTATUS(status) : -1;
    r.out = slurp(out);
    r.err = slurp(err);
    return r;
  }

  std::filesystem::path dir_;
};

}  // namespace gradcodec::test
