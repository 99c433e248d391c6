// SPDX-License-Identifier: Apache-2.0
// Where a call's buffers must live (detail::check_buffer_memory), against a device backend's
// memory services played by the host: device-only memory on another device than the
// current one is refused with a message naming both (a launch there would fault), managed
// memory and the current device's memory pass, host memory is refused on the device and
// device memory on the host.
#include <gtest/gtest.h>

#include <string>

#include "contract/backend.hpp"

namespace gc = gradcodec;

namespace {

// The fake machine: which device each test buffer lives on (-1: host), which are managed,
// and the current device.
float on_gpu0[4], on_gpu1[4], managed[4], host[4];
int current = 0;

int device_of(const void* p) noexcept {
  if (p == on_gpu0) return 0;
  if (p == on_gpu1) return 1;
  return -1;
}
bool owns(const void* p) noexcept { return p == on_gpu0 || p == on_gpu1 || p == managed; }
int current_device() noexcept { return current; }

const gc::detail::device_access fake{owns, device_of, current_device, nullptr, nullptr};

gc::status check(bool on_device, const void* a, const void* b) {
  return gc::detail::check_buffer_memory(&fake, on_device, {{a, "input"}, {b, "frame"}}, "codec");
}

}  // namespace

TEST(BufferMemory, AnotherDevicesMemoryIsRefusedWithBothDevicesNamed) {
  current = 0;
  const gc::status st = check(true, on_gpu0, on_gpu1);
  ASSERT_EQ(st.code(), gc::status_code::invalid_argument);
  const std::string m(st.message());
  EXPECT_NE(m.find("the frame is on cuda:1 but the current device is cuda:0"), std::string::npos)
      << m;
  EXPECT_NE(m.find("cudaSetDevice(1)"), std::string::npos) << m;
  current = 1;
  EXPECT_EQ(check(true, on_gpu1, on_gpu0).code(), gc::status_code::invalid_argument);
  current = 0;
}

TEST(BufferMemory, CurrentDeviceAndManagedMemoryPass) {
  current = 0;
  EXPECT_TRUE(check(true, on_gpu0, managed).ok());
  current = 1;
  EXPECT_TRUE(check(true, on_gpu1, nullptr).ok());
  // Managed memory is reachable from every device.
  EXPECT_TRUE(check(true, managed, managed).ok());
  // A current device the runtime cannot tell refuses nothing more than before.
  current = -1;
  EXPECT_TRUE(check(true, on_gpu1, on_gpu0).ok());
  current = 0;
}

TEST(BufferMemory, HostMemoryOnTheDeviceAndDeviceMemoryOnTheHostAreRefused) {
  current = 0;
  const gc::status on_device = check(true, on_gpu0, host);
  ASSERT_EQ(on_device.code(), gc::status_code::invalid_argument);
  EXPECT_NE(std::string(on_device.message()).find("the frame is not device memory"),
            std::string::npos)
      << on_device.message();
  const gc::status on_host = check(false, host, on_gpu1);
  ASSERT_EQ(on_host.code(), gc::status_code::invalid_argument);
  EXPECT_NE(std::string(on_host.message()).find("on the host: the frame is device memory"),
            std::string::npos)
      << on_host.message();
  EXPECT_TRUE(check(false, host, managed).ok());
  // Without a device backend every buffer is the host's.
  EXPECT_TRUE(gc::detail::check_buffer_memory(nullptr, true, {{on_gpu1, "input"}}, "codec").ok());
}
