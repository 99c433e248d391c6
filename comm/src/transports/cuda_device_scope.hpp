// SPDX-License-Identifier: Apache-2.0
//! @file
//! A scope in which one CUDA device is current: the NCCL communicator and its buffer
//! services allocate, record events and launch on the communicator's device, whatever the
//! calling thread's current device is.
#pragma once

#include <cuda_runtime_api.h>

namespace gradcodec::comm::detail {

//! Makes `device` current for a scope and restores the caller's device after it.
class device_scope {
 public:
  explicit device_scope(int device) {
    if (cudaGetDevice(&previous_) == cudaSuccess && previous_ != device &&
        cudaSetDevice(device) == cudaSuccess)
      switched_ = true;
  }
  ~device_scope() {
    if (switched_) (void)cudaSetDevice(previous_);
  }
  device_scope(const device_scope&) = delete;
  device_scope& operator=(const device_scope&) = delete;

 private:
  int previous_ = 0;
  bool switched_ = false;
};

}  // namespace gradcodec::comm::detail
