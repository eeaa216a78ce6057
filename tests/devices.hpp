#pragma once
// The devices a test runs on: the CPU, and the first Vulkan device where the
// machine has one (CI: lavapipe). Tests that need Vulkan skip without it.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <ostream>
#include <string>
#include <vector>

#include <rumus/rumus.hpp>

namespace rumus {
// gtest prints a device parameter by its name.
inline void PrintTo(const Device& d, std::ostream* os) { *os << d.str(); }
}  // namespace rumus

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

// The fixture of a suite whose tests run once per device of test_devices():
// TEST_P(Suite, Name) reads the device from GetParam(). Declare the suite with
// RUMUS_DEVICE_SUITE(Suite) once, before its tests; each test is then named
// Suite.Name/cpu, Suite.Name/vulkan0 (ctest labels the second kind vulkan).
class DeviceTest : public ::testing::TestWithParam<Device> {};

// The devices a device suite runs on. gtest asks once its flags are read:
// a filter that names tests exactly and none on Vulkan (ctest runs one test
// per process) cannot select a Vulkan instance, so the driver, whose start
// costs about 0.1 s a process, is not started to find one.
inline std::vector<Device> device_suite_devices() {
  const std::string filter = GTEST_FLAG_GET(filter);
  // A filter of exclusions only ("-A:B") selects everything else.
  const bool may_select_vulkan = filter.empty() || filter.front() == '-' ||
                                 filter.find_first_of("*?") != std::string::npos || filter.find("vulkan") != std::string::npos;
  return may_select_vulkan ? test_devices() : std::vector<Device>{Device::cpu()};
}

inline std::string device_test_name(const ::testing::TestParamInfo<Device>& info) {
  std::string name;
  for (char c : info.param.str())
    if (std::isalnum(static_cast<unsigned char>(c))) name += c;
  return name;
}

// A device's result against a reference (usually computed on the CPU in f64):
// each element within tol, relative to the reference where it exceeds 1, NaN
// where the reference has NaN.
inline void expect_matches(const Tensor& got, const Tensor& want, double tol, const std::string& what) {
  ASSERT_EQ(got.shape(), want.shape()) << what;
  const std::vector<double> g = got.to_vector<double>(), w = want.to_vector<double>();
  for (std::size_t i = 0; i < g.size(); ++i) {
    const bool ok = g[i] == w[i] || std::abs(g[i] - w[i]) <= tol * std::max(1.0, std::abs(w[i])) ||
                    (std::isnan(g[i]) && std::isnan(w[i]));
    ASSERT_TRUE(ok) << what << " element " << i << ": " << g[i] << " on " << got.device().str() << ", want " << w[i];
  }
}

}  // namespace rumus::testing

#define RUMUS_DEVICE_SUITE(Suite)                  \
  using Suite = ::rumus::testing::DeviceTest;      \
  INSTANTIATE_TEST_SUITE_P(, Suite, ::testing::ValuesIn(::rumus::testing::device_suite_devices()), \
                           ::rumus::testing::device_test_name)

#define REQUIRE_VULKAN() \
  if (!::rumus::testing::have_vulkan()) GTEST_SKIP() << "no Vulkan device (install mesa-vulkan-drivers for lavapipe)"
