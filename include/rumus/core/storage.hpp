#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>

#include "rumus/core/device.hpp"
#include "rumus/core/device_backend.hpp"
#include "rumus/core/export.hpp"

RUMUS_API_BEGIN

namespace rumus {

// Bytes on one device plus the version counter shared by every view of them.
class Storage {
 public:
  Storage(Device device, std::size_t nbytes);
  // No bytes yet: released from the start, until take_bytes() gives some
  // (the parameters empty() makes under an nn::DeferredInit).
  struct Unallocated {};
  Storage(Device device, std::size_t nbytes, Unallocated);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  Device device() const { return device_; }
  std::size_t nbytes() const { return nbytes_; }
  // Host pointer on the CPU; an opaque backend handle on other devices.
  // The raw bytes. Code that writes them other than through rumus's ops must
  // call bump_version() afterwards: backends may keep copies derived from
  // these bytes (a convolution's reordered input, see id()) until it does.
  void* data() const {
    if (released_) [[unlikely]] throw_released();
    return data_;
  }
  DeviceBackend& backend() const { return *backend_; }

  // Never reused by another Storage of this process, unlike the address: with
  // version(), it names these exact bytes, so a backend may keep data derived
  // from them (e.g. a reordered copy) and know when it is stale.
  std::uint64_t id() const { return id_; }
  std::uint64_t version() const { return version_.load(std::memory_order_relaxed); }
  void bump_version() { version_.fetch_add(1, std::memory_order_relaxed); }

  // Frees the bytes while every handle to this Storage stays valid: FSDP
  // frees a unit's gathered parameters between its forward and its backward,
  // while the tensors its ops saved for backward still refer to them. Until
  // take_bytes() gives bytes back, data() throws an Error.
  void release_bytes();
  bool released() const { return released_; }
  // Takes `other`'s bytes (same device and size; `other` is left released).
  // The version stays: the caller puts back the very bytes it released, so
  // what was derived from them (and saved tensors' checks) stays valid.
  void take_bytes(Storage& other);

 private:
  Device device_;
  std::size_t nbytes_;
  DeviceBackend* backend_;
  void* data_;
  std::uint64_t id_;
  std::atomic<std::uint64_t> version_{0};
  bool released_ = false;
  [[noreturn]] void throw_released() const;
};

}  // namespace rumus

RUMUS_API_END
