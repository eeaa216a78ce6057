#pragma once
// Device memory and ordering shared with another API on the same GPU (CUDA,
// for NcclGroup: src/distributed/nccl_group.cpp). The device exports a
// buffer's memory and two timeline semaphores as fds that the other API
// imports:
// - the device's own timeline, signalled as its queued work completes: the
//   other API waits on it before it reads what a copy_to_shared wrote;
// - a peer timeline the other API signals when it is done: copy_from_shared
//   waits on it on the device.
// Neither side waits on the host.
#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "rumus/core/device.hpp"

namespace rumus {
class Storage;
}

namespace rumus::interop {

// One dedicated device allocation that the other API maps whole.
class SharedBuffer {
 public:
  virtual ~SharedBuffer() = default;
  virtual std::size_t size() const = 0;             // the bytes copies may use
  virtual std::size_t allocation_size() const = 0;  // the allocation's bytes: what an importer maps
  virtual int export_fd() = 0;                      // a new fd, owned by whoever imports it
};

// A timeline semaphore that the other API signals.
class PeerTimeline {
 public:
  virtual ~PeerTimeline() = default;
  virtual int export_fd() = 0;  // a new fd, owned by whoever imports it
};

class DeviceInterop {
 public:
  virtual ~DeviceInterop() = default;
  // The GPU's UUID (what CUDA's cudaDeviceProp::uuid holds for the same GPU).
  virtual std::array<std::uint8_t, 16> uuid() const = 0;
  virtual std::unique_ptr<SharedBuffer> allocate(std::size_t bytes) = 0;
  virtual std::unique_ptr<PeerTimeline> create_peer_timeline() = 0;
  // A new fd of the device's timeline.
  virtual int export_device_timeline() = 0;
  // Queues a copy of `nbytes` of `src` (from `src_offset`) into `dst` (from
  // `dst_offset`) after the work that wrote `src`, and submits it. Returns the
  // device timeline's value once the copy is done.
  virtual std::uint64_t copy_to_shared(const Storage& src, std::size_t src_offset, SharedBuffer& dst,
                                       std::size_t dst_offset, std::size_t nbytes) = 0;
  // Queues a copy of `nbytes` of `src` (from `src_offset`) into `dst` (from
  // `dst_offset`) that starts once `peer` reaches `value`; work queued later
  // that uses `dst` follows it.
  virtual void copy_from_shared(SharedBuffer& src, std::size_t src_offset, Storage& dst, std::size_t dst_offset,
                                std::size_t nbytes, PeerTimeline& peer, std::uint64_t value) = 0;
};

// The interop of `device`, alive for the process; nullptr where the device
// cannot share (the CPU, a Vulkan driver without the fd extensions), and
// then `why` says so.
DeviceInterop* device_interop(Device device, std::string* why = nullptr);

}  // namespace rumus::interop
