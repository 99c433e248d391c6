// SPDX-License-Identifier: Apache-2.0
//! @file
//! The block-scaled codecs: OCP MX (mxfp8, mxfp6, mxfp4, mxint8), nvfp4 and row-wise FP8,
//! one implementation with a descriptor per member (docs/codecs.md, "Block-scaled codecs").
#include <algorithm>
#include <array>
#include <cmath>

#include "contract/block_scaled.hpp"
#include "gradcodec/blocks/block_scaled.hpp"
#include "src/codecs/descriptor.hpp"
#include "src/codecs/error_bounds.hpp"

namespace gradcodec::detail {
namespace {

constexpr param_info param_rounding{"rounding", "nearest", "nearest|stochastic",
                                    "element rounding (ties to even, or stochastic)"};
constexpr param_info param_rotate{"rotate", "0", "0|1",
                                  "randomized Hadamard rotation of each block before quantizing"};
constexpr param_info param_mx_block{"block", "32", "1..16777216", "elements per E8M0 scale"};
constexpr param_info param_fp8{"fmt", "e4m3", "e4m3|e5m2", "FP8 element format"};

constexpr std::array mxfp8_params{param_fp8, param_mx_block, param_rounding, param_rotate,
                                  param_nonfinite};
constexpr std::array mxfp6_params{param_info{"fmt", "e3m2", "e3m2|e2m3", "FP6 element format"},
                                  param_mx_block, param_rounding, param_rotate, param_nonfinite};
constexpr std::array mx_single_params{param_mx_block, param_rounding, param_rotate,
                                      param_nonfinite};
constexpr std::array nvfp4_params{
    param_info{"block", "16", "1..16777216", "elements per E4M3 scale"}, param_rounding,
    param_rotate, param_nonfinite};
constexpr std::array fp8row_params{
    param_fp8,
    param_info{"block", "4096", "1..16777216",
               "row length of a flat tensor (a matrix's rows are its own)"},
    param_rounding, param_rotate, param_nonfinite};

constexpr std::string_view level_meaning =
    "element format (1 e4m3, 2 e5m2, 3 e3m2, 4 e2m3, 5 e2m1, 6 int8)";
constexpr header_meaning block_fields{"", "block", level_meaning, ""};
constexpr collective_support collectives{.two_phase = true};

status check(const codec_spec& s) {
  if (!blocks::element_allowed(s.id, s.fmt))
    return {status_code::invalid_spec, std::string(codec_name(s.id))
                                           .append(": fmt ")
                                           .append(element_format_name(s.fmt))
                                           .append(" is not one of its element formats")};
  return {};
}

void print(const codec_spec& s, spec_printer& out) {
  // The element format is a parameter of the codecs that have a choice.
  for (const param_info& p : info(s.id).params)
    if (p.key == "fmt") out.add("fmt", element_format_name(s.fmt));
  out.add("block", s.bucket);
  out.add_rounding(s.rounding);
  out.add_flag("rotate", s.rotate);
}

std::uint64_t payload_from_spec(const codec_spec& s, std::uint64_t n, dtype,
                                std::uint64_t rows) noexcept {
  return blocks::layout_of(block_rule_of(s), n, block_scaled_group(s, n, rows)).total;
}

result<std::uint64_t> payload_from_header(const frame_header& h) noexcept {
  const auto fmt = static_cast<element_format>(h.level);
  if (!blocks::element_allowed(h.codec, fmt))
    return corrupt_frame("element format not of this codec");
  return blocks::layout_of(blocks::block_rule_of(h.codec, fmt, h.mode), h.n, h.group).total;
}

void spec_from_header(const frame_header& h, codec_spec& s) noexcept {
  s.fmt = static_cast<element_format>(h.level);
  s.rotate = (h.mode & mode_rotate) != 0;
}

void mode_names(std::uint8_t mode, std::string& out) {
  append_name(out, mode & mode_rotate ? "rotated" : "not rotated");
}

//! docs/codecs.md, "Error bounds": per element of a block with largest |w| = A,
//! |error| <= kappa |w| + alpha A, kappa the relative rounding of the element's binade (or
//! the saturation at the top), alpha A the rounding of the element format's subnormals.
//! Over a block of B elements that gives the l2 bound (kappa + alpha sqrt(B))^2, and the
//! infinity norm at most the top binade's step (or the saturation). A rotation of one piece
//! (B a power of two up to 256) keeps the l2 bound (H / sqrt(m) is orthogonal) and
//! multiplies the infinity bound by up to m.
codec_bounds block_scaled_bounds(const codec_spec& s, std::uint64_t n) noexcept {
  const blocks::minifloat f = blocks::minifloat_of(s.fmt);
  const bool stochastic = s.rounding == rounding_mode::stochastic;
  const double step = stochastic ? 1.0 : 0.5;  // of a quantum
  const double largest = blocks::max_element(f);
  const double top = f.integer ? 1.0 : std::ldexp(1.0, f.emax);  // smallest |r| of the top binade
  const double min_quantum = f.integer ? 1.0 / 64 : std::ldexp(1.0, f.emin() - int(f.mantissa));
  double kappa = f.integer ? 0.0 : step * std::ldexp(1.0, -int(f.mantissa));
  double alpha = step * min_quantum / top;  // the block max's |r| is at least `top`
  double sat = 0,
         top_step = step * (f.integer ? 1.0 / 64 : std::ldexp(1.0, f.emax - int(f.mantissa))) / top;
  if (s.id == codec_id::fp8row) {
    // r = w / (A / largest): the block max maps to `largest` (to f32 rounding).
    alpha = step * min_quantum / largest;
    top_step = step * std::ldexp(1.0, f.emax - int(f.mantissa)) / largest;
    sat = 0x1p-20;
  } else if (s.id == codec_id::nvfp4) {
    // The E4M3 block scale is within 1/16 of A / 6 / g, so the block max maps to
    // 6 (1 +- 1/16): 1/16 of it may saturate, and a step of the top binade is 1/(6 * 15/16).
    const double lo = 6.0 * 15 / 16;
    alpha = step * min_quantum / lo;
    top_step = step * 2 / lo;
    sat = 1.0 / 16;
  } else {
    sat = (2 * top - largest) / largest;  // OCP's floor rule: up to 2 top maps into `largest`
  }
  kappa = std::max(kappa, sat);
  const double B = group_of(s, n);
  const double l2 = kappa + alpha * std::sqrt(B);
  double max_rel = std::max(top_step, sat);
  double variance = l2 * l2;
  if (s.rotate) {
    const double piece = blocks::rotation_piece(static_cast<std::uint64_t>(B));
    max_rel *= piece;
    if (piece != B) variance = no_bound;  // several pieces share one scale: no bound derived
  }
  codec_bounds b = quantizer_bounds(false, variance, max_rel,
                                    s.rotate ? "rotated: the l2 bound of the block's element "
                                               "rounding; an element may take a piece's whole "
                                               "error"
                                             : "each element within its binade's step (or the "
                                               "saturation) of the block maximum");
  b.max_absolute = 0x1p-100;  // scales clamped at 2^-127, subnormal decodes
  return b;
}

//! A member of the family: its format default and block.
constexpr codec_descriptor member(codec_info info, void (*defaults)(codec_spec&) noexcept) {
  return {
      .info = info,
      .modes = mode_stochastic | mode_rotate,
      .defaults = defaults,
      .check = check,
      .print = print,
      .payload_from_spec = payload_from_spec,
      .payload_from_header = payload_from_header,
      .spec_from_header = spec_from_header,
      .mode_names = mode_names,
      .bounds = block_scaled_bounds,
  };
}

}  // namespace

extern constinit const codec_descriptor mxfp8_descriptor =
    member({codec_id::mxfp8, "mxfp8", "OCP MXFP8: FP8 elements, E8M0 scale per block",
            "8 + 8/block", false, mxfp8_params, block_fields, collectives},
           [](codec_spec& s) noexcept {
             s.bucket = 32;
             s.fmt = element_format::e4m3;
           });

extern constinit const codec_descriptor mxfp6_descriptor =
    member({codec_id::mxfp6, "mxfp6", "OCP MXFP6: FP6 elements, E8M0 scale per block",
            "6 + 8/block", false, mxfp6_params, block_fields, collectives},
           [](codec_spec& s) noexcept {
             s.bucket = 32;
             s.fmt = element_format::e3m2;
           });

extern constinit const codec_descriptor mxfp4_descriptor =
    member({codec_id::mxfp4, "mxfp4", "OCP MXFP4: E2M1 elements, E8M0 scale per block",
            "4 + 8/block", false, mx_single_params, block_fields, collectives},
           [](codec_spec& s) noexcept {
             s.bucket = 32;
             s.fmt = element_format::e2m1;
           });

extern constinit const codec_descriptor mxint8_descriptor =
    member({codec_id::mxint8, "mxint8", "OCP MXINT8: 8-bit integers, E8M0 scale per block",
            "8 + 8/block", false, mx_single_params, block_fields, collectives},
           [](codec_spec& s) noexcept {
             s.bucket = 32;
             s.fmt = element_format::int8;
           });

extern constinit const codec_descriptor nvfp4_descriptor =
    member({codec_id::nvfp4, "nvfp4", "NVFP4: E2M1 elements, E4M3 scale per block, f32 per tensor",
            "4 + 8/block", false, nvfp4_params, block_fields, collectives},
           [](codec_spec& s) noexcept {
             s.bucket = 16;
             s.fmt = element_format::e2m1;
           });

extern constinit const codec_descriptor fp8row_descriptor =
    member({codec_id::fp8row, "fp8row", "row-wise FP8: f32 scale per row", "8 + 32/row", false,
            fp8row_params, header_meaning{"", "row length", level_meaning, ""}, collectives},
           [](codec_spec& s) noexcept { s.bucket = 4096; });

}  // namespace gradcodec::detail
