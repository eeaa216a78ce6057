#include "rumus/core/storage.hpp"

#include <atomic>

namespace rumus {

namespace {
std::uint64_t next_storage_id() {
  static std::atomic<std::uint64_t> next{1};
  return next.fetch_add(1, std::memory_order_relaxed);
}
}  // namespace

Storage::Storage(Device device, std::size_t nbytes)
    : device_(device), nbytes_(nbytes), backend_(&device_backend(device)), data_(backend_->allocate(nbytes)), id_(next_storage_id()) {}

Storage::~Storage() { backend_->deallocate(data_, nbytes_); }

}  // namespace rumus
