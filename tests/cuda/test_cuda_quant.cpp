// SPDX-License-Identifier: Apache-2.0
// The quantizers (kernels/quant.cu) on a GPU against the reference, byte for byte
// (codec_check.hpp; skipped with a message without a GPU).
#include "codec_check.hpp"

namespace {

const char* const kQuantSpecs[] = {
    "qsgd",
    "qsgd:rounding=nearest,norm=max,bucket=17",
    "qsgd:levels=127,bucket=4101",
    "terngrad",
    "terngrad:clip=2.5,bucket=257",
    "minmax",
    "minmax:bits=3,bucket=33,rounding=stochastic",
    "minmax:bits=8,bucket=2049",
    // Buckets of 8192 elements and more take a block each (bucket.cuh's launch_scales), and a
    // last bucket shorter than the rest.
    "qsgd:bucket=100000",
    "terngrad:clip=2.5,bucket=8192",
    "minmax:bits=4,bucket=9000",
};

}  // namespace

GRADCODEC_CUDA_FAMILY_TESTS(CudaQuant, kQuantSpecs);
