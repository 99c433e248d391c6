// SPDX-License-Identifier: Apache-2.0
//! @file
//! Error bounds: each codec's descriptor derives its own (src/codecs/, from docs/codecs.md,
//! "Error bounds and error feedback").
#include "gradcodec/bounds.hpp"

#include "src/codecs/descriptor.hpp"

namespace gradcodec {

codec_bounds bounds(const codec_spec& s, std::uint64_t n) noexcept {
  const auto raw = static_cast<int>(s.id);
  if (raw < 1 || raw > codec_count) return {};
  return detail::descriptor_of(s.id).bounds(s, n);
}

}  // namespace gradcodec
