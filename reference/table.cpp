// SPDX-License-Identifier: Apache-2.0
//! @file
//! The reference backend's codec table.
#include "common.hpp"
#include "contract/powersgd_kernels.hpp"
#include "contract/vote_kernels.hpp"

namespace gradcodec::detail {

namespace ref = gradcodec::reference;

const backend_table& reference_backend() noexcept {
  constexpr codec_ops block_scaled{ref::block_scaled_workspace, ref::block_scaled_encode,
                                   ref::block_scaled_decode, nullptr};
  static const backend_table table{
      "reference",
      {
          {ref::topk_workspace, ref::topk_encode, ref::topk_decode, nullptr},
          {ref::dgc_workspace, ref::dgc_encode, ref::dgc_decode, nullptr},
          {ref::randomk_workspace, ref::randomk_encode, ref::randomk_decode, nullptr},
          {ref::threshold_workspace, ref::threshold_encode, ref::threshold_decode, nullptr},
          {ref::qsgd_workspace, ref::qsgd_encode, ref::qsgd_decode, nullptr},
          {ref::terngrad_workspace, ref::terngrad_encode, ref::terngrad_decode, nullptr},
          {ref::minmax_workspace, ref::minmax_encode, ref::minmax_decode, nullptr},
          {ref::onebit_workspace, ref::onebit_encode, ref::onebit_decode, nullptr},
          {ref::sign_workspace, ref::sign_encode, ref::sign_decode, nullptr},
          {ref::cast_workspace, ref::cast_encode, ref::cast_decode, nullptr},
          {ref::cast_workspace, ref::cast_encode, ref::cast_decode, nullptr},
          {ref::powersgd_workspace, ref::powersgd_encode, ref::powersgd_decode, nullptr},
          block_scaled,
          block_scaled,
          block_scaled,
          block_scaled,
          block_scaled,
          block_scaled,
      },
      nullptr,
      nullptr,
      &powersgd_scalar_kernels(),
      &vote_scalar_kernels()};
  return table;
}

}  // namespace gradcodec::detail
