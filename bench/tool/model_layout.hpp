// SPDX-License-Identifier: Apache-2.0
//! @file
//! The tensor layout PowerSGD factorises in `gradcodec bench --allreduce`, which
//! `gradcodec plan --tensors model` predicts.
#pragma once

#include <cstdint>
#include <vector>

#include "gradcodec/comm/bucket.hpp"

namespace gradcodec::tool {

//! A model-shaped layout of n elements. d = the largest power of two in [16, 1024] with
//! 16 d^2 <= n; L = max(1, floor(0.75 n / 12 d^2)) transformer blocks of 3d x d (qkv),
//! d x d (projection), 4d x d and d x 4d (MLP); an embedding of floor((n - 12 d^2 L) / d)
//! rows x d in front; the rest (< d elements) a vector. Below 4096 elements: one
//! near-square matrix.
std::vector<comm::tensor_slot> model_layout(std::uint64_t n);

}  // namespace gradcodec::tool
