// Which backends share memory with other APIs: the Vulkan one (vulkan/interop.cpp).
#include "device_interop.hpp"

namespace rumus {
#ifdef RUMUS_VULKAN
namespace vulkan {
interop::DeviceInterop* device_interop(Device device, std::string* why);
}
#endif

namespace interop {

DeviceInterop* device_interop(Device device, std::string* why) {
#ifdef RUMUS_VULKAN
  if (!device.is_cpu()) return vulkan::device_interop(device, why);
#endif
  if (why) *why = device.str() + " shares no memory with other APIs";
  return nullptr;
}

}  // namespace interop
}  // namespace rumus
