// SPDX-License-Identifier: Apache-2.0
// The selecting codecs with indices: top-k, threshold and DGC (kernels/topk.cu,
// threshold.cu, dgc.cu over select.cu) on a GPU against the reference, byte for byte
// (codec_check.hpp; skipped with a message without a GPU).
#include "codec_check.hpp"

namespace {

const char* const kSparseSpecs[] = {
    "topk",
    "topk:ratio=0.001",
    "topk:k=1",
    "topk:ratio=0.5",
    "threshold:tau=0.5",
    "threshold:tau=0.5,cap=7",
    "threshold:tau=0",
    "dgc",
    "dgc:ratio=0.01,sample=0.05",
};

}  // namespace

GRADCODEC_CUDA_FAMILY_TESTS(CudaSparse, kSparseSpecs);
