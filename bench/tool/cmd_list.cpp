// SPDX-License-Identifier: Apache-2.0
//! @file
//! gradcodec list: every codec, its summary, parameters, bits per element and whether
//! error feedback is safe with its defaults.
#include <array>
#include <iostream>

#include "codec_calls.hpp"
#include "commands.hpp"
#include "text.hpp"

namespace gradcodec::tool {
namespace {

constexpr std::array list_options{backend_option};

}  // namespace

const command_spec list_spec{
    "list",
    "Lists every codec with its parameters, and the backends available.",
    "",
    "Lists every codec with its summary, bits per element (fp32 input), default spec,\n"
    "whether error feedback is safe with it (gradcodec::bounds) and parameters (key,\n"
    "default, range, meaning), and which backends are available.",
    "example:\n"
    "  gradcodec list\n",
    list_options,
    0};

int run_list(const parsed_args& args) {
  const exec_options opt = exec_from_args(args);
  std::cout << "gradcodec " << version_string << ": " << all_codecs().size()
            << " codecs\nbackends:";
  for (backend b : {backend::reference, backend::cpu, backend::cuda}) {
    std::cout << " " << backend_name(b)
              << (backend_available(b) ? " (available)" : " (not available)");
    if (b == opt.where) std::cout << " [selected]";
  }
  std::cout << "\n";
  for (backend b : {backend::cpu, backend::cuda})
    if (!backend_available(b))
      std::cout << "  " << backend_name(b) << ": " << backend_unavailable_reason(b) << "\n";
  for (const auto& c : all_codecs()) {
    std::cout << "\n"
              << c.name << " - " << c.summary << "\n"
              << "  bits/element: " << c.bits_per_element
              << "    unbiased: " << (c.unbiased ? "yes" : "no")
              << "\n  default spec: " << to_string(make_spec(c.id)) << "\n";
    const codec_bounds b = bounds(make_spec(c.id));
    std::cout << "  error feedback: " << (b.feedback_safe ? "safe" : "unsafe") << " - " << b.reason
              << "\n";
    std::size_t wk = 3, wd = 7, wr = 5;  // "key", "default", "range"
    for (const auto& p : c.params) {
      wk = std::max(wk, p.key.size());
      wd = std::max(wd, p.default_value.size());
      wr = std::max(wr, p.range.size());
    }
    std::cout << "  " << pad("key", wk) << "  " << pad("default", wd) << "  " << pad("range", wr)
              << "  meaning\n";
    for (const auto& p : c.params)
      std::cout << "  " << pad(std::string(p.key), wk) << "  "
                << pad(std::string(p.default_value), wd) << "  " << pad(std::string(p.range), wr)
                << "  " << p.doc << "\n";
  }
  return 0;
}

}  // namespace gradcodec::tool
