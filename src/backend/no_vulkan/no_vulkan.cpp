// Built when rumus is configured without Vulkan: no GPU is ever "best", and
// asking for a Vulkan device says why it cannot be had.
#include "rumus/backend/backend.hpp"
#include "rumus/core/error.hpp"

namespace rumus {

int best_vulkan_device_index() { return -1; }

std::unique_ptr<Backend> make_vulkan_backend(int index) {
  throw DeviceError("backend: no backend for device vulkan:" + std::to_string(index) +
                    " (this build of rumus has no Vulkan support)");
}

}  // namespace rumus
