// SPDX-License-Identifier: Apache-2.0
//! @file
//! The measurements of `gradcodec bench` (host and CUDA backends alike): one record per
//! codec x target x operation, the printed table, and the JSON file.
#pragma once

#include <cstdint>
#include <iostream>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "text.hpp"

namespace gradcodec::tool {

struct record {
  std::string codec, backend, isa;
  int threads = 1;
  std::uint64_t n = 0;
  std::string op;
  double median_s = 0, gbps = 0, roofline_share = 0, ratio = 0, rel_error = 0;
  double bytes_per_element = 0;
  std::uint64_t runs = 0;
  std::string note;  //!< non-empty: not measured (not implemented, skipped, failed)
};

//! ||a - x|| / ||x|| in double (the relative error of a decode).
double rel_error(const float* a, std::span<const float> x);

//! Writes every record (measured ones under "records", noted ones under "notes").
void write_json(const std::string& path, const std::vector<record>& records);

class table {
 public:
  std::size_t width = 26;  //!< of the codec column: the longest spec string

  void header() const {
    std::cout << pad("codec", width) << pad("backend", 10) << pad("isa", 7) << pad("thr", 4, true)
              << "  " << pad("op", 18) << pad("median_ms", 11, true) << pad("GB/s", 8, true)
              << pad("%memcpy", 8, true) << pad("ratio", 9, true) << pad("rel_err", 11, true)
              << "\n";
  }
  void row(const record& r) {
    std::cout << pad(r.codec, width) << pad(r.backend, 10) << pad(r.isa, 7)
              << pad(std::to_string(r.threads), 4, true) << "  " << pad(r.op, 18);
    if (!r.note.empty()) {
      std::cout << "  " << r.note << "\n" << std::flush;
      return;
    }
    std::cout << pad(strprintf("%.3f", r.median_s * 1e3), 11, true)
              << pad(strprintf("%.2f", r.gbps), 8, true)
              << pad(strprintf("%.1f", r.roofline_share * 100), 8, true)
              << pad(strprintf("%.2f", r.ratio), 9, true)
              << pad(strprintf("%.3e", r.rel_error), 11, true) << "\n"
              << std::flush;
  }
};

struct run_state {
  std::uint64_t min_runs = 5;
  double memcpy_gbps = 0;
  std::vector<record> records;
  table out;
  std::size_t failed = 0;
  //! --verify: every measured frame and output against the reference backend's.
  bool verify = false;
  std::size_t verified = 0;

  void add(record r) {
    if (r.note.empty() && r.median_s > 0) {
      r.gbps = r.bytes_per_element * static_cast<double>(r.n) / r.median_s * 1e-9;
      r.roofline_share = memcpy_gbps > 0 ? r.gbps / memcpy_gbps : 0.0;
    }
    out.row(r);
    records.push_back(std::move(r));
  }
};

//! The end of a run: the JSON file when asked for, then failure if any measurement failed.
void finish_run(const run_state& st, const std::optional<std::string>& json);

}  // namespace gradcodec::tool
