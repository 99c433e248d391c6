// SPDX-License-Identifier: Apache-2.0
//! @file
//! The CUDA codecs of kernels/*.cu, gathered into the backend table by table.cu.
#pragma once

#include "contract/backend.hpp"

namespace gradcodec::cuda {

#define GRADCODEC_CUDA_CODEC(name)                                                        \
  std::size_t name##_workspace(const codec_spec&, const_tensor_view shape, operation op); \
  status name##_encode(const detail::encode_call& c);                                     \
  status name##_decode(const detail::decode_call& c);                                     \
  status name##_encode_feedback(const detail::feedback_call& c);
GRADCODEC_CUDA_CODEC(cast)
GRADCODEC_CUDA_CODEC(quant)
GRADCODEC_CUDA_CODEC(sign)
GRADCODEC_CUDA_CODEC(randomk)
GRADCODEC_CUDA_CODEC(topk)
GRADCODEC_CUDA_CODEC(threshold)
GRADCODEC_CUDA_CODEC(dgc)
GRADCODEC_CUDA_CODEC(powersgd)
GRADCODEC_CUDA_CODEC(block_scaled)
#undef GRADCODEC_CUDA_CODEC

//! The PowerSGD phase API on the GPU (kernels/powersgd.cu).
extern const detail::device_powersgd_phases powersgd_phases;

}  // namespace gradcodec::cuda
