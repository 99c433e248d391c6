// SPDX-License-Identifier: Apache-2.0
//! @file
//! The codec descriptor: every per-codec fact of the front end in one place. Each codec's
//! file in this folder defines one (a family sharing one implementation defines one per
//! member); table.cpp lists them by id. Spec parsing and printing, validation, the size
//! bound, the frame checks, spec_of(header), the error bounds, `gradcodec inspect` and the
//! collective strategies ask the descriptor instead of switching on the codec id.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "gradcodec/bounds.hpp"
#include "gradcodec/dtype.hpp"
#include "gradcodec/format.hpp"
#include "gradcodec/spec.hpp"
#include "gradcodec/status.hpp"

namespace gradcodec::detail {

//! Appends "key=value" parameters to a spec's canonical string.
class spec_printer {
 public:
  explicit spec_printer(std::string& out) : out_(out) {}
  void add(std::string_view key, std::string_view value);
  void add(std::string_view key, std::uint64_t value);
  void add_double(std::string_view key, double value);
  void add_float(std::string_view key, float value);
  void add_flag(std::string_view key, bool on) { add(key, on ? "1" : "0"); }
  void add_rounding(rounding_mode r) {
    add("rounding", r == rounding_mode::nearest ? "nearest" : "stochastic");
  }

 private:
  std::string& out_;
  bool first_ = true;
};

struct codec_descriptor {
  //! Name, summary, bits per element, parameters, what the header's fields hold and the
  //! collective strategies (the public face: all_codecs(), info()).
  codec_info info;
  //! The header mode bits its frames may set (others are refused as corrupt).
  std::uint8_t modes = 0;
  //! Its defaults over codec_spec's (make_spec).
  void (*defaults)(codec_spec& s) noexcept = nullptr;
  //! Ranges and combinations of its own parameters (validate); the id, the bucket and
  //! block ranges are checked for every codec.
  status (*check)(const codec_spec& s) = nullptr;
  //! Its parameters in canonical order (to_string; nonfinite is printed for every codec).
  void (*print)(const codec_spec& s, spec_printer& out) = nullptr;
  //! Payload bytes of a frame from the spec: exact, or the largest a frame may take when
  //! the size follows the data. n elements of `type`; rows of the matrix view (0: none).
  std::uint64_t (*payload_from_spec)(const codec_spec& s, std::uint64_t n, dtype type,
                                     std::uint64_t rows) noexcept = nullptr;
  //! Payload bytes a frame with this header has, after its own fields' range checks (the
  //! generic ones, fields it does not use and unknown modes, are done by the caller).
  result<std::uint64_t> (*payload_from_header)(const frame_header& h) noexcept = nullptr;
  //! The spec fields its header carries (spec_of; rounding and the bucket of a bucketed
  //! codec are read for every codec).
  void (*spec_from_header)(const frame_header& h, codec_spec& s) noexcept = nullptr;
  //! Names of its own mode bits, appended comma-separated (describe_mode; rounding is
  //! named for every rounding codec).
  void (*mode_names)(std::uint8_t mode, std::string& out) = nullptr;
  //! Its error bounds (bounds.hpp).
  codec_bounds (*bounds)(const codec_spec& s, std::uint64_t n) noexcept = nullptr;
};

//! The parameter every codec has (printed only when not the default).
inline constexpr param_info param_nonfinite{"nonfinite", "propagate", "propagate|error",
                                            "keep NaN/Inf visible, or refuse to encode them"};

//! The descriptor of a valid id.
const codec_descriptor& descriptor_of(codec_id id) noexcept;

//! "NAME: KEY must be in WANT".
status out_of_range(const codec_spec& s, std::string_view key, std::string_view want);
//! A corrupt-frame status.
status corrupt_frame(std::string_view why);
//! Appends one comma-separated name.
void append_name(std::string& out, std::string_view name);

}  // namespace gradcodec::detail
