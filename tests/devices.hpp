#pragma once
// The devices a test runs on: the CPU, and the first Vulkan device where the
// machine has one (CI: lavapipe). Tests that need Vulkan skip without it.
#include <gtest/gtest.h>

#include <vector>

#include <rumus/rumus.hpp>

namespace rumus::testing {

inline const Device kGpu = Device::vulkan(0);

inline bool have_vulkan() {
  static const bool ok = [] {
    try {
      device_backend(kGpu);
      return true;
    } catch (const DeviceError&) {
      return false;
    }
  }();
  return ok;
}

// Every device of this build that the machine has.
inline std::vector<Device> test_devices() {
  std::vector<Device> d{Device::cpu()};
  if (have_vulkan()) d.push_back(kGpu);
  return d;
}

}  // namespace rumus::testing

#define REQUIRE_VULKAN() \
  if (!::rumus::testing::have_vulkan()) GTEST_SKIP() << "no Vulkan device (install mesa-vulkan-drivers for lavapipe)"
