// SPDX-License-Identifier: Apache-2.0
// Random-k (kernels/randomk.cu) on a GPU against the reference, byte for byte
// (codec_check.hpp; skipped with a message without a GPU).
#include "codec_check.hpp"

namespace {

const char* const kRandomkSpecs[] = {
    "randomk",
    "randomk:ratio=0.3,unbiased=1",
    "randomk:k=3",
};

}  // namespace

GRADCODEC_CUDA_FAMILY_TESTS(CudaRandomk, kRandomkSpecs);
