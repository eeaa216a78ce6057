#include <array>
#include <map>
#include <memory>
#include <mutex>

#include "rumus/backend/backend.hpp"
#include "rumus/core/error.hpp"

namespace rumus {

std::unique_ptr<Backend> make_cpu_backend();
// Defined by the Vulkan backend, or as a thrower in builds without it. Calling
// it from here keeps the Vulkan objects in links against the static library.
std::unique_ptr<Backend> make_vulkan_backend(int index);

namespace {
struct Registry {
  std::mutex mu;
  std::map<std::pair<int, int>, std::unique_ptr<Backend>> backends;
  std::array<BackendFactory, 2> factories{nullptr, &make_vulkan_backend};
};
// Leaked on purpose: storages may be freed during static destruction.
Registry& registry() {
  static Registry* r = new Registry();
  return *r;
}
}  // namespace

void register_backend(Device::Kind kind, BackendFactory factory) {
  std::lock_guard lk(registry().mu);
  registry().factories[static_cast<int>(kind)] = factory;
}

Backend& backend(Device device) {
  static Backend* cpu = make_cpu_backend().release();
  if (device.is_cpu()) return *cpu;
  auto& r = registry();
  std::lock_guard lk(r.mu);
  auto key = std::make_pair(static_cast<int>(device.kind), device.index);
  auto it = r.backends.find(key);
  if (it != r.backends.end()) return *it->second;
  BackendFactory factory = r.factories[static_cast<int>(device.kind)];
  if (!factory) throw DeviceError("backend: no backend for device " + device.str());
  auto [slot, _] = r.backends.emplace(key, factory(device.index));
  return *slot->second;
}

}  // namespace rumus
