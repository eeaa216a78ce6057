#pragma once
// The provider registry: each backend registers one provider per device kind,
// and Device::list/best/parse and device_backend() are answered from it.
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "rumus/core/device_backend.hpp"

namespace rumus::detail {

struct DeviceProvider {
  Device::Kind kind;
  std::function<int()> count;                     // devices of this kind (0 when none is usable)
  std::function<std::string(int index)> name;     // e.g. the driver's device name
  std::function<bool(int index)> accelerator;     // worth choosing over the CPU in Device::best()
  std::function<std::unique_ptr<DeviceBackend>(int index)> make;
};

void register_device_provider(DeviceProvider provider);

// The providers built into the library (CPU first, then Vulkan when
// configured). Defined by the backend layer; the registry asks once.
std::vector<DeviceProvider> builtin_providers();

}  // namespace rumus::detail
