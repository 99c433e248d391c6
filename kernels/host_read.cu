// SPDX-License-Identifier: Apache-2.0
//! @file
//! The backend's few unavoidable host waits (a decode's header check, a sparse decode's
//! index verdict, a threshold encode's count): small device-to-host copies into pinned
//! per-thread bytes, waited on with an event recorded right after the copy. A copy into
//! pageable memory would go through the driver's own staging; pinned bytes take the DMA
//! directly, and the event waits for exactly this copy.
#include <cstring>

#include "common.cuh"

namespace gradcodec::cuda {

namespace {

//! The calling thread's pinned bytes (portable: any device may copy into them) and one
//! event per device (an event belongs to the device current when it was made).
struct host_staging {
  void* bytes = nullptr;
  cudaEvent_t events[max_devices] = {};
  host_staging() = default;
  host_staging(const host_staging&) = delete;
  host_staging& operator=(const host_staging&) = delete;
  ~host_staging() {
    for (cudaEvent_t e : events)
      if (e != nullptr) (void)cudaEventDestroy(e);
    if (bytes != nullptr) (void)cudaFreeHost(bytes);
  }
};

}  // namespace

status read_to_host(void* host, const void* device, std::size_t bytes, void* stream,
                    const char* what) {
  if (bytes > host_read_max) return {status_code::internal_error, "read_to_host: too many bytes"};
  thread_local host_staging staging;
  const cudaStream_t s = stream_of(stream);
  cudaError_t e = cudaSuccess;
  if (staging.bytes == nullptr)
    e = cudaHostAlloc(&staging.bytes, host_read_max, cudaHostAllocPortable);
  int dev = 0;
  if (e == cudaSuccess) e = cudaGetDevice(&dev);  // the calls launch on it: s is its stream
  if (e == cudaSuccess)
    e = cudaMemcpyAsync(staging.bytes, device, bytes, cudaMemcpyDeviceToHost, s);
  if (e == cudaSuccess && dev >= 0 && dev < max_devices) {
    cudaEvent_t& ev = staging.events[dev];
    if (ev == nullptr) e = cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);
    if (e == cudaSuccess) e = cudaEventRecord(ev, s);
    if (e == cudaSuccess) e = cudaEventSynchronize(ev);
  } else if (e == cudaSuccess) {
    e = cudaStreamSynchronize(s);
  }
  if (e != cudaSuccess) return cuda_error(e, what);
  std::memcpy(host, staging.bytes, bytes);
  return {};
}

}  // namespace gradcodec::cuda
