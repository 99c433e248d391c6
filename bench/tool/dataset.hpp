// SPDX-License-Identifier: Apache-2.0
//! @file
//! The built-in gradient-like data set of `gradcodec eval`: the layers of a small
//! convolutional network and a transformer block (matrices, conv kernels, embeddings,
//! biases and norms), Gaussian or heavy-tailed (Student-t, 3 degrees of freedom) values
//! at per-layer scales. Fixed seed, generated from the library's Philox counter generator.
#pragma once

#include <string>
#include <vector>

#include "array.hpp"

namespace gradcodec::tool {

struct tensor_item {
  std::string name;
  array values;  //!< f32, with the layer's shape
};

//! The data set (about 5.9 million f32 elements in 36 tensors). Deterministic: the same
//! values on every run; they depend on the platform's log/sin/cos only through the
//! rounding of a double to float.
std::vector<tensor_item> builtin_dataset();

}  // namespace gradcodec::tool
