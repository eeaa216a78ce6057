#include "rumus/core/storage.hpp"

#include <atomic>
#include <utility>

#include <fmt/format.h>

#include "rumus/core/error.hpp"

namespace rumus {

namespace {
std::uint64_t next_storage_id() {
  static std::atomic<std::uint64_t> next{1};
  return next.fetch_add(1, std::memory_order_relaxed);
}
}  // namespace

Storage::Storage(Device device, std::size_t nbytes)
    : device_(device), nbytes_(nbytes), backend_(&device_backend(device)), data_(backend_->allocate(nbytes)), id_(next_storage_id()) {}

Storage::Storage(Device device, std::size_t nbytes, Unallocated)
    : device_(device), nbytes_(nbytes), backend_(&device_backend(device)), data_(nullptr), id_(next_storage_id()),
      released_(true) {}

Storage::~Storage() {
  if (!released_) backend_->deallocate(data_, nbytes_);
}

void Storage::release_bytes() {
  if (released_) return;
  backend_->deallocate(data_, nbytes_);
  data_ = nullptr;
  released_ = true;
}

void Storage::take_bytes(Storage& other) {
  if (other.device_ != device_ || other.nbytes_ != nbytes_ || other.released_)
    throw Error(fmt::format("Storage::take_bytes: expected {} bytes on {} that are not released, got {} bytes on {}{}",
                            nbytes_, device_.str(), other.nbytes_, other.device_.str(),
                            other.released_ ? " (released)" : ""));
  if (!released_) backend_->deallocate(data_, nbytes_);
  data_ = std::exchange(other.data_, nullptr);
  other.released_ = true;
  released_ = false;
}

void Storage::throw_released() const {
  throw Error(fmt::format(
      "tensor memory of {} bytes on {} is released by its owner until it is needed again (a parameter of an FSDP "
      "unit between the unit's forward and its backward: see fsdp::ShardOptions::reshard_after_forward; or one "
      "built under nn::DeferredInit and not materialised yet: see nn::materialize)",
      nbytes_, device_.str()));
}

}  // namespace rumus
