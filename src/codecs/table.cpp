// SPDX-License-Identifier: Apache-2.0
//! @file
//! The codec descriptors by id: the one list of codecs in the front end.
#include <array>

#include "src/codecs/descriptor.hpp"

namespace gradcodec::detail {

extern const codec_descriptor topk_descriptor, dgc_descriptor, randomk_descriptor,
    threshold_descriptor, qsgd_descriptor, terngrad_descriptor, minmax_descriptor,
    onebit_descriptor, sign_descriptor, fp16_descriptor, bf16_descriptor, powersgd_descriptor,
    mxfp8_descriptor, mxfp6_descriptor, mxfp4_descriptor, mxint8_descriptor, nvfp4_descriptor,
    fp8row_descriptor;

namespace {

// In codec_id order (CodecTable.ListsEveryCodecUnderItsId checks).
constexpr std::array<const codec_descriptor*, codec_count> descriptors{
    &topk_descriptor,  &dgc_descriptor,      &randomk_descriptor, &threshold_descriptor,
    &qsgd_descriptor,  &terngrad_descriptor, &minmax_descriptor,  &onebit_descriptor,
    &sign_descriptor,  &fp16_descriptor,     &bf16_descriptor,    &powersgd_descriptor,
    &mxfp8_descriptor, &mxfp6_descriptor,    &mxfp4_descriptor,   &mxint8_descriptor,
    &nvfp4_descriptor, &fp8row_descriptor};

//! The public codec_info of each descriptor, contiguous for all_codecs().
const std::array<codec_info, codec_count>& infos() noexcept {
  static const std::array<codec_info, codec_count> table = [] {
    std::array<codec_info, codec_count> t{};
    for (std::size_t i = 0; i < t.size(); ++i) t[i] = descriptors[i]->info;
    return t;
  }();
  return table;
}

}  // namespace

const codec_descriptor& descriptor_of(codec_id id) noexcept {
  const auto i = static_cast<std::size_t>(id) - 1;
  return *descriptors[i < descriptors.size() ? i : 0];
}

}  // namespace gradcodec::detail

namespace gradcodec {

std::span<const codec_info> all_codecs() noexcept { return detail::infos(); }

const codec_info& info(codec_id id) noexcept {
  const auto i = static_cast<std::size_t>(id) - 1;
  return detail::infos()[i < codec_count ? i : 0];
}

std::string_view codec_name(codec_id id) noexcept {
  const auto i = static_cast<std::size_t>(id) - 1;
  return i < codec_count ? detail::infos()[i].name : std::string_view("unknown");
}

}  // namespace gradcodec
