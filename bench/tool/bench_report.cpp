// SPDX-License-Identifier: Apache-2.0
//! @file
//! The JSON file of `gradcodec bench`.
#include <cmath>
#include <fstream>

#include "bench_common.hpp"
#include "bench_report.hpp"
#include "error.hpp"

namespace gradcodec::tool {

double rel_error(const float* a, std::span<const float> x) {
  double e2 = 0, r2 = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double d = static_cast<double>(a[i]) - x[i];
    e2 += d * d;
    r2 += static_cast<double>(x[i]) * x[i];
  }
  return r2 > 0 ? std::sqrt(e2 / r2) : (e2 > 0 ? INFINITY : 0.0);
}

void finish_run(const run_state& st, const std::optional<std::string>& json) {
  if (json) {
    write_json(*json, st.records);
    std::cout << "\nwrote " << *json << "\n";
  }
  if (st.failed > 0)
    fail(std::to_string(st.failed) + " measurement" + (st.failed > 1 ? "s" : "") +
         " failed (see the table)");
}

void write_json(const std::string& path, const std::vector<record>& records) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  if (!f) fail("cannot open '" + path + "' for writing");
  f << "{\n  \"tool\": \"gradcodec bench\",\n  \"records\": [";
  bool first_rec = true, first_note = true;
  for (const auto& r : records) {
    if (!r.note.empty()) continue;
    f << (first_rec ? "\n" : ",\n") << "    {\"codec\": " << json_string(r.codec)
      << ", \"backend\": " << json_string(r.backend) << ", \"isa\": " << json_string(r.isa)
      << ", \"threads\": " << r.threads << ", \"n\": " << r.n << ", \"op\": " << json_string(r.op)
      << ", \"median_s\": " << json_number(r.median_s) << ", \"runs\": " << r.runs
      << ", \"bytes_per_element\": " << json_number(r.bytes_per_element)
      << ", \"gbps\": " << json_number(r.gbps)
      << ", \"roofline_share\": " << json_number(r.roofline_share)
      << ", \"ratio\": " << json_number(r.ratio) << ", \"rel_error\": " << json_number(r.rel_error)
      << "}";
    first_rec = false;
  }
  f << "\n  ],\n  \"notes\": [";
  for (const auto& r : records) {
    if (r.note.empty()) continue;
    f << (first_note ? "\n" : ",\n") << "    {\"codec\": " << json_string(r.codec)
      << ", \"backend\": " << json_string(r.backend) << ", \"isa\": " << json_string(r.isa)
      << ", \"threads\": " << r.threads << ", \"n\": " << r.n << ", \"op\": " << json_string(r.op)
      << ", \"note\": " << json_string(r.note) << "}";
    first_note = false;
  }
  f << "\n  ]\n}\n";
  f.flush();
  if (!f) fail("cannot write '" + path + "'");
}

}  // namespace gradcodec::tool
