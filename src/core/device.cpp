#include "rumus/core/device.hpp"

#include <cstdlib>

#include "rumus/core/error.hpp"

namespace rumus {

Device Device::parse(const std::string& text) {
  if (text == "cpu") return cpu();
  if (text == "vulkan") return vulkan(0);
  if (text.rfind("vulkan:", 0) == 0) {
    char* end = nullptr;
    long index = std::strtol(text.c_str() + 7, &end, 10);
    if (end != text.c_str() + 7 && *end == '\0' && index >= 0) return vulkan(static_cast<int>(index));
  }
  if (text == "best") return best();
  throw DeviceError("Device::parse: expected \"cpu\", \"vulkan\", \"vulkan:N\" or \"best\", got \"" + text + "\"");
}

}  // namespace rumus
