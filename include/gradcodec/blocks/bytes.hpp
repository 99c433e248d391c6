// SPDX-License-Identifier: Apache-2.0
//! @file
//! Fixed-width values at unaligned byte offsets of a wire buffer (frames, state blobs):
//! memcpy, so any alignment is fine and the bytes are the host's (little-endian on every
//! supported target, as docs/format.md requires).
#pragma once

#include <cstddef>
#include <cstring>

namespace gradcodec::blocks {

template <class T>
void put(std::byte* at, T v) {
  std::memcpy(at, &v, sizeof v);
}
template <class T>
T get(const std::byte* at) {
  T v;
  std::memcpy(&v, at, sizeof v);
  return v;
}

}  // namespace gradcodec::blocks
