// SPDX-License-Identifier: Apache-2.0
// The sign codecs (kernels/sign.cu) on a GPU against the reference, byte for byte
// (codec_check.hpp; skipped with a message without a GPU).
#include "codec_check.hpp"

namespace {

const char* const kSignSpecs[] = {
    "sign",
    "sign:scale=mean,bucket=100",
    "sign:scale=l2,bucket=7",
    "onebit",
    "onebit:bucket=3",
    // Buckets of 8192 elements and more take a block each (bucket.cuh's launch_scales), and a
    // last bucket shorter than the rest.
    "sign:scale=mean,bucket=65536",
    "sign:scale=l2,bucket=20001",
    "onebit:bucket=20000",
};

}  // namespace

GRADCODEC_CUDA_FAMILY_TESTS(CudaSign, kSignSpecs);
