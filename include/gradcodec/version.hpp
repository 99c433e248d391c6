// SPDX-License-Identifier: Apache-2.0
//! @file
//! Library version (kept equal to the CMake project version by a test).
#pragma once

#define GRADCODEC_VERSION_MAJOR 0
#define GRADCODEC_VERSION_MINOR 4
#define GRADCODEC_VERSION_PATCH 0

namespace gradcodec {
inline constexpr const char* version_string = "0.4.0";
}  // namespace gradcodec
