// SPDX-License-Identifier: Apache-2.0
// The 16-bit casts (kernels/cast.cu) on a GPU against the reference, byte for byte
// (codec_check.hpp; skipped with a message without a GPU).
#include "codec_check.hpp"

namespace {

const char* const kCastSpecs[] = {
    "fp16",
    "bf16",
};

}  // namespace

GRADCODEC_CUDA_FAMILY_TESTS(CudaCast, kCastSpecs);
