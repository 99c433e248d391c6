// SPDX-License-Identifier: Apache-2.0
//! @file
//! The codec configurations every backend test runs: each codec with its defaults plus the
//! variants that exercise other code paths (bucket tails, bit widths, norms, scales).
#pragma once

namespace gradcodec::test {

inline const char* const kSpecs[] = {
    "topk:ratio=0.05",
    "topk:k=3",
    "dgc:ratio=0.05",
    "randomk:ratio=0.1",
    "randomk:ratio=0.1,unbiased=1",
    "threshold:tau=0.5",
    "threshold:tau=0.1,cap=5",
    "qsgd",
    "qsgd:levels=127,bucket=100,norm=max,rounding=nearest",
    "terngrad",
    "terngrad:bucket=64,clip=2.5",
    "minmax",
    "minmax:bits=1,bucket=33",
    "minmax:bits=3,bucket=100,rounding=stochastic",
    "minmax:bits=8",
    "onebit",
    "onebit:bucket=100",
    "sign",
    "sign:scale=mean,bucket=100",
    "sign:scale=l2",
    "fp16",
    "bf16",
    "powersgd:rank=2",
    "powersgd:rank=1,min_rate=0",
    "mxfp8",
    "mxfp8:fmt=e5m2,block=20,rounding=stochastic",
    "mxfp8:rotate=1",
    "mxfp8:fmt=e5m2,block=64",
    "mxfp6",
    "mxfp6:fmt=e2m3,rotate=1,block=40",
    "mxfp4",
    "mxfp4:rotate=1,rounding=stochastic",
    "mxfp4:rounding=stochastic,block=48",
    "mxfp4:rotate=1,block=528",
    "mxint8:block=33",
    "nvfp4",
    "nvfp4:rotate=1,rounding=stochastic",
    "fp8row:block=100",
    "fp8row:rounding=stochastic",
    "fp8row:fmt=e5m2,block=64,rotate=1",
    "fp8row:rotate=1,rounding=stochastic,block=1000",
};

}  // namespace gradcodec::test
