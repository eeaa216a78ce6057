// The device providers built into the library: the one place that knows
// which backends this build has.
#include "../core/device_registry.hpp"
#include "cpu/cpu_backend.hpp"
#include "kernel_registry.hpp"
#ifdef RUMUS_VULKAN
#include "vulkan/vulkan_backend.hpp"
#endif

namespace rumus::detail {

std::vector<DeviceProvider> builtin_providers() {
  register_kernel_families();  // before the first device exists, so before any kernel runs
  std::vector<DeviceProvider> providers;
  providers.push_back(cpu::provider());
#ifdef RUMUS_VULKAN
  providers.push_back(vulkan::provider());
#endif
  return providers;
}

}  // namespace rumus::detail
