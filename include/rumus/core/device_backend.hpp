#pragma once
// What a Storage needs of its device: memory, transfers, synchronisation and
// figures. The kernels a device runs are not part of the public API; they
// live behind this interface in the library (src/backend/).
#include <cstddef>
#include <cstdint>
#include <memory>

#include "rumus/core/device.hpp"
#include "rumus/core/export.hpp"

RUMUS_API_BEGIN

namespace rumus {

class Storage;

// Memory and traffic figures of one device, for tests and tuning.
struct DeviceStats {
  std::size_t bytes_in_use = 0;       // held by live tensors (rounded to size classes)
  std::size_t peak_bytes_in_use = 0;
  std::size_t bytes_reserved = 0;     // device memory blocks held by the allocator
  std::size_t blocks = 0;
  std::uint64_t host_to_device = 0;   // transfers (write calls)
  std::uint64_t device_to_host = 0;   // transfers (read calls)
  std::uint64_t submits = 0;          // command-buffer submissions
  std::uint64_t commands = 0;         // kernels and copies recorded (outside captures)
};

// Device work recorded by capture() (core/capture.hpp); a CapturedStep owns it.
class CapturedWork {
 public:
  virtual ~CapturedWork() = default;
  // Throws CaptureError when the work cannot be replayed now (called before
  // the replay hooks, so a refused replay changes no host state).
  virtual void check_replay() const {}
  virtual void replay() = 0;
};

class DeviceBackend {
 public:
  virtual ~DeviceBackend() = default;
  virtual Device device() const = 0;
  // Host pointer on the CPU; an opaque handle on other devices.
  virtual void* allocate(std::size_t nbytes) = 0;
  virtual void deallocate(void* data, std::size_t nbytes) = 0;
  // Ordered with the device's queued work: a read waits for the writes before it.
  virtual void write(Storage& dst, std::size_t byte_offset, const void* src, std::size_t nbytes) = 0;
  virtual void read(const Storage& src, std::size_t byte_offset, void* dst, std::size_t nbytes) = 0;
  virtual void synchronize() {}
  virtual DeviceStats stats() const { return {}; }

  // Capture: a device that queues its work records the kernels called on the
  // capturing thread between begin_capture() and end_capture() instead of
  // running them. A device that runs kernels at once (the CPU) answers false.
  virtual bool can_capture() const { return false; }
  virtual void begin_capture() {}
  virtual std::unique_ptr<CapturedWork> end_capture() { return nullptr; }
  virtual void abort_capture() {}  // the closure threw: drop what was recorded
};

// The backend of `device`, created on first use and alive for the process.
// Throws DeviceError for a device this build or machine does not have.
DeviceBackend& device_backend(Device device);

// Waits until every kernel queued on `device` has finished.
void synchronize(Device device);
// Memory and transfer figures of `device` (zeros where a backend keeps none).
DeviceStats device_stats(Device device);

}  // namespace rumus

RUMUS_API_END
