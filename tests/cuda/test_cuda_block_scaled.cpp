// SPDX-License-Identifier: Apache-2.0
// The block-scaled codecs (kernels/block_scaled.cu) on a GPU against the reference, byte for byte
// (codec_check.hpp; skipped with a message without a GPU).
#include "codec_check.hpp"

namespace {

const char* const kBlockScaledSpecs[] = {
    "mxfp8",
    "mxfp8:fmt=e5m2,block=20,rounding=stochastic",
    "mxfp8:rotate=1",
    "mxfp6:fmt=e2m3,rotate=1,block=40",
    "mxfp4:rotate=1,rounding=stochastic",
    "mxint8:block=33",
    "nvfp4",
    "nvfp4:rotate=1,rounding=stochastic",
    "fp8row:block=100",
};

}  // namespace

GRADCODEC_CUDA_FAMILY_TESTS(CudaBlockScaled, kBlockScaledSpecs);
