#include "device_registry.hpp"

#include <map>
#include <mutex>
#include <vector>

#include "rumus/core/error.hpp"

namespace rumus {

namespace detail {
namespace {

struct Registry {
  std::mutex mu;
  std::vector<DeviceProvider> providers;
  std::map<std::pair<int, int>, std::unique_ptr<DeviceBackend>> backends;
};

// Leaked on purpose: storages may be freed during static destruction.
Registry& registry() {
  static Registry* r = [] {
    auto* reg = new Registry();
    reg->providers = builtin_providers();
    return reg;
  }();
  return *r;
}

const DeviceProvider* find_provider(Registry& r, Device::Kind kind) {
  for (auto& p : r.providers)
    if (p.kind == kind) return &p;
  return nullptr;
}

}  // namespace

void register_device_provider(DeviceProvider provider) {
  auto& reg = registry();
  std::lock_guard lk(reg.mu);
  for (auto& p : reg.providers)
    if (p.kind == provider.kind) {
      p = std::move(provider);
      return;
    }
  reg.providers.push_back(std::move(provider));
}

}  // namespace detail

DeviceBackend& device_backend(Device device) {
  auto& r = detail::registry();
  std::lock_guard lk(r.mu);
  auto key = std::make_pair(static_cast<int>(device.kind), device.index);
  if (auto it = r.backends.find(key); it != r.backends.end()) return *it->second;
  const detail::DeviceProvider* p = detail::find_provider(r, device.kind);
  if (!p)
    throw DeviceError("device_backend: this build of rumus has no backend for device " + device.str());
  auto [slot, _] = r.backends.emplace(key, p->make(device.index));
  return *slot->second;
}

void synchronize(Device device) { device_backend(device).synchronize(); }

void synchronize_all() {
  auto& r = detail::registry();
  std::vector<DeviceBackend*> used;
  {
    std::lock_guard lk(r.mu);
    for (auto& [key, b] : r.backends) used.push_back(b.get());
  }
  for (DeviceBackend* b : used) b->synchronize();  // backends live for the process
}
DeviceStats device_stats(Device device) { return device_backend(device).stats(); }

std::vector<DeviceInfo> Device::list() {
  auto& r = detail::registry();
  std::vector<detail::DeviceProvider> providers;
  {
    std::lock_guard lk(r.mu);
    providers = r.providers;
  }
  std::vector<DeviceInfo> out;
  for (auto& p : providers)
    for (int i = 0, n = p.count(); i < n; ++i) out.push_back({Device{p.kind, i}, p.name(i)});
  return out;
}

Device Device::best() {
  for (const DeviceInfo& d : list()) {
    if (d.device.is_cpu()) continue;
    auto& r = detail::registry();
    std::lock_guard lk(r.mu);
    if (auto* p = detail::find_provider(r, d.device.kind); p && p->accelerator(d.device.index)) return d.device;
  }
  return Device::cpu();
}

}  // namespace rumus
