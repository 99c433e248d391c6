// SPDX-License-Identifier: Apache-2.0
//! @file
//! Helpers shared by the two benchmarks of `gradcodec bench` (the codec benchmark and
//! the allreduce benchmark): the ','-separated list options, sizes, the median, and the
//! JSON scalars.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace gradcodec::tool {

//! Splits a ',' list; usage error (naming `what`) on an empty entry.
std::vector<std::string> split_list(const std::string& what, const std::string& text);

//! The --codecs syntax of eval: a key=value piece continues the previous spec.
std::vector<std::string> split_codecs(const std::vector<std::string>& values);

//! One --sizes entry: N or 2^K, 1..2^32 (usage error naming `what` otherwise).
std::uint64_t parse_size(const std::string& text, const std::string& what = "--sizes");

//! "2^K" for powers of two from 1024, else the decimal count.
std::string size_name(std::uint64_t n);

//! The median (the mean of the middle two for an even count); 0 for none.
double median(std::vector<double> v);

//! A JSON string literal (quotes, backslashes and control characters escaped).
std::string json_string(const std::string& s);

//! A JSON number ("%.9g"), or null when not finite.
std::string json_number(double v);

//! Gradient-like data: a sum of four uniforms (near Gaussian), one element in 64 ten times
//! larger for a heavy tail, from a fixed integer hash so every run sees the same values.
//! stream 0 is the data of `gradcodec bench`; bench --allreduce gives rank r stream r + 1.
void fill_gradient(std::span<float> x, std::uint64_t stream = 0);

//! The codecs `gradcodec calibrate` measures and `gradcodec plan` accepts by default: the
//! allreduce benchmark's set without bf16, which both always add.
inline constexpr const char* planner_default_codecs =
    "minmax:bits=4,qsgd,terngrad,onebit,sign:scale=mean,topk:ratio=0.01,randomk:ratio=0.01,"
    "powersgd:rank=4,fp16";

//! The frame bytes of repeated encodes. Error feedback carries the residual across the
//! runs, so the frames of data-dependent codecs (threshold) grow from run to run; the bytes
//! model of encode_ef uses their mean, not the size of a fresh encode.
struct frame_tally {
  std::uint64_t total = 0, calls = 0;
  void add(std::uint64_t bytes) noexcept {
    total += bytes;
    ++calls;
  }
  [[nodiscard]] std::uint64_t mean() const noexcept { return calls == 0 ? 0 : total / calls; }
};

}  // namespace gradcodec::tool
