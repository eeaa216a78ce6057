#pragma once
#include <atomic>
#include <map>
#include <mutex>

#include "../../core/device_registry.hpp"
#include "../backend.hpp"

namespace rumus::cpu {

// The CPU device: memory and transfers. Its kernels are the family files
// beside this one (cpu/<family>.cpp), registered per kernel.
class CpuBackend final : public Backend {
 public:
  CpuBackend();
  Device device() const override { return Device::cpu(); }
  void* allocate(std::size_t nbytes) override;
  void deallocate(void* data, std::size_t nbytes) override;
  void write(Storage& dst, std::size_t byte_offset, const void* src, std::size_t nbytes) override;
  void read(const Storage& src, std::size_t byte_offset, void* dst, std::size_t nbytes) override;
  DeviceStats stats() const override;

 private:
  mutable std::mutex cache_mu_;
  std::multimap<std::size_t, void*> cache_;  // idle blocks by size
  std::size_t cached_bytes_ = 0;
  std::atomic<std::size_t> in_use_{0}, peak_{0};  // bytes held by live storages (rounded)
};

// The CPU provider: one device, "cpu".
detail::DeviceProvider provider();

}  // namespace rumus::cpu
