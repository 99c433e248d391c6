// SPDX-License-Identifier: Apache-2.0
//! @file
//! Codec specs: a small value type naming a codec and its parameters, with a string form
//! such as "topk:ratio=0.01" or "qsgd:levels=7,bucket=512". docs/codecs.md defines every
//! parameter, default and range.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "gradcodec/format.hpp"
#include "gradcodec/status.hpp"

namespace gradcodec {

//! What encode does with NaN/Inf in its input: keep them visible in the frame (default),
//! or refuse with status_code::nonfinite_input.
enum class nonfinite_policy : std::uint8_t { propagate = 0, error = 1 };

//! A codec and all its parameters. Fields a codec does not use keep their defaults and
//! are ignored; make_spec() fills the codec's own defaults.
struct codec_spec {
  codec_id id = codec_id::topk;
  double ratio = 0.01;         //!< topk/dgc/randomk: kept fraction, k = max(1, floor(ratio*n))
  std::uint64_t k = 0;         //!< topk/dgc/randomk: absolute count; overrides ratio when > 0
  double sample = 0.01;        //!< dgc: sampled fraction used to estimate the threshold
  bool unbiased = false;       //!< randomk: scale kept values by their stratum size
  float tau = 1e-3f;           //!< threshold: keep |x| >= tau
  std::uint64_t cap = 0;       //!< threshold: keep at most cap (the largest); 0 = no cap
  std::uint32_t levels = 7;    //!< qsgd: s levels per sign
  std::uint32_t bucket = 512;  //!< qsgd/terngrad/minmax/onebit/sign: elements per scale group;
                               //!< block-scaled codecs: the block (key "block")
  std::uint32_t bits = 4;      //!< minmax: bits per element, 1..8
  rounding_mode rounding = rounding_mode::nearest;  //!< qsgd/minmax/block-scaled
  element_format fmt = element_format::e4m3;        //!< block-scaled: the element format
  bool rotate = false;             //!< block-scaled: randomized Hadamard rotation of each block
  norm_kind norm = norm_kind::l2;  //!< qsgd
  float clip = 0.0f;               //!< terngrad: clip at clip*sigma of the bucket; 0 = off
  scale_kind scale = scale_kind::none;  //!< sign: none (signSGD), mean |x|, or ||x||2/sqrt(n)
  std::uint32_t rank = 4;               //!< powersgd: rank r
  float eps = 1e-8f;                    //!< powersgd: Gram-Schmidt epsilon
  float min_rate = 2.0f;  //!< powersgd: compress only if rows*cols > min_rate*(rows+cols)*r
  nonfinite_policy nonfinite = nonfinite_policy::propagate;

  friend bool operator==(const codec_spec&, const codec_spec&) = default;
};

//! The spec of a codec with all of its defaults.
codec_spec make_spec(codec_id id) noexcept;

//! Parses "name[:key=value[,key=value...]]". Errors name the codec, key or value at fault.
result<codec_spec> parse_spec(std::string_view text);

//! k of docs/codecs.md "Counts": the values a topk, dgc or randomk frame of n elements
//! carries (k, or ratio * n but at least 1, never more than n; 0 for n = 0).
std::uint64_t sparse_count(const codec_spec& spec, std::uint64_t n) noexcept;

//! Checks ranges and combinations (the same checks parse_spec applies).
status validate(const codec_spec& spec);

//! The canonical string form: the codec's name and each of its parameters.
std::string to_string(const codec_spec& spec);

std::string_view codec_name(codec_id id) noexcept;
//! "e4m3", "e5m2", "e3m2", "e2m3", "e2m1" or "int8".
std::string_view element_format_name(element_format f) noexcept;
result<element_format> element_format_from_name(std::string_view name);
result<codec_id> codec_from_name(std::string_view name);

//! One documented parameter of a codec, for `gradcodec list` and the bindings.
struct param_info {
  std::string_view key;
  std::string_view default_value;
  std::string_view range;
  std::string_view doc;
};

//! What a frame header's codec fields hold for a codec (docs/format.md); empty: unused, and
//! a frame must carry zero there.
struct header_meaning {
  std::string_view count;
  std::string_view group;
  std::string_view level;
  std::string_view param;
};

//! The collective strategies (gradcodec/comm, docs/comm.md) that can carry a codec's frames
//! besides allgather, which carries every codec's.
struct collective_support {
  bool two_phase = false;      //!< reduce-scatter of frames, f32 sum, requantize, all-gather
  bool dense = false;          //!< each rank decodes its own frame, then a dense allreduce
  bool majority_vote = false;  //!< an elementwise vote of the ranks' signs
};

struct codec_info {
  codec_id id;
  std::string_view name;
  std::string_view summary;
  std::string_view bits_per_element;  //!< the formula, fp32 input
  bool unbiased;                      //!< unbiased in its default configuration
  std::span<const param_info> params;
  header_meaning header;
  collective_support collectives;
};

std::span<const codec_info> all_codecs() noexcept;
const codec_info& info(codec_id id) noexcept;

}  // namespace gradcodec
