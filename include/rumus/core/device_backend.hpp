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
  std::uint64_t queue_drains = 0;     // host waits for all queued work (reads, synchronize)
  // With RUMUS_VULKAN_PROFILE=1, captured replays timed on the GPU: their
  // count and GPU time, and the time from each one's end to the next one's
  // start (eager work between them, and the GPU waiting for the host).
  std::uint64_t replays_timed = 0;
  double replay_gpu_ms = 0;
  std::uint64_t replay_gaps = 0;
  double replay_gap_ms = 0;
};

// Host memory a device copies into and out of directly: mapped, pinned memory
// on a GPU, plain memory on the CPU. Distributed staging keeps a few of these
// and lets the reduction (or MPI) work on data() in place. Made by
// DeviceBackend::allocate_host; it belongs to that backend's device.
class HostBuffer {
 public:
  virtual ~HostBuffer() = default;
  HostBuffer(const HostBuffer&) = delete;
  HostBuffer& operator=(const HostBuffer&) = delete;
  void* data() const { return data_; }
  std::size_t size() const { return size_; }
  Device device() const { return device_; }
  // Returns once every copy queued into or out of this buffer has finished:
  // then the host may read what was copied in and overwrite what was copied
  // out. It waits for those copies alone, not for the device's other work.
  virtual void wait() {}

 protected:
  HostBuffer(Device device, void* data, std::size_t size) : data_(data), size_(size), device_(device) {}

 private:
  void* data_;
  std::size_t size_;
  Device device_;
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

  // Staging through host buffers: copies queued behind the device work they
  // depend on, never a wait for the whole queue. On a GPU they run on its
  // transfer queue where it has one (the compute queue otherwise).
  // A host buffer of at least `nbytes` for this device.
  std::unique_ptr<HostBuffer> allocate_host(std::size_t nbytes);
  // Queues a copy of `nbytes` of `src` (from `src_offset`) into `dst` (from
  // `dst_offset`), after every write to `src` queued before it; dst.wait()
  // returns once the bytes are there. Kernels queued later that write `src`
  // wait for the copy.
  void copy_to_host(const Storage& src, std::size_t src_offset, HostBuffer& dst, std::size_t dst_offset,
                    std::size_t nbytes);
  // Queues a copy of `nbytes` of `src` (from `src_offset`) into `dst` (from
  // `dst_offset`), after every use of `dst` queued before it; kernels queued
  // later that use `dst` see the bytes. The host must not write `src` again
  // before src.wait().
  void copy_from_host(HostBuffer& src, std::size_t src_offset, Storage& dst, std::size_t dst_offset,
                      std::size_t nbytes);

  // Capture: a device that queues its work records the kernels called on the
  // capturing thread between begin_capture() and end_capture() instead of
  // running them. A device that runs kernels at once (the CPU) answers false.
  virtual bool can_capture() const { return false; }
  virtual void begin_capture() {}
  virtual std::unique_ptr<CapturedWork> end_capture() { return nullptr; }
  virtual void abort_capture() {}  // the closure threw: drop what was recorded

 protected:
  // The staging calls after their argument checks. The defaults, for a
  // device whose memory the host addresses (the CPU): plain memory, and the
  // copies are read() and write().
  virtual std::unique_ptr<HostBuffer> make_host_buffer(std::size_t nbytes);
  virtual void queue_copy_to_host(const Storage& src, std::size_t src_offset, HostBuffer& dst, std::size_t dst_offset,
                                  std::size_t nbytes);
  virtual void queue_copy_from_host(HostBuffer& src, std::size_t src_offset, Storage& dst, std::size_t dst_offset,
                                    std::size_t nbytes);
};

// The backend of `device`, created on first use and alive for the process.
// Throws DeviceError for a device this build or machine does not have.
DeviceBackend& device_backend(Device device);

// Waits until every kernel queued on `device` has finished.
void synchronize(Device device);
// synchronize() on every device this process has used (none is created).
// Call it before a program ends with work still queued: a driver whose
// threads still compile or run when exit() tears its libraries down may crash
// (Mesa's lavapipe did).
void synchronize_all();
// Memory and transfer figures of `device` (zeros where a backend keeps none).
DeviceStats device_stats(Device device);

}  // namespace rumus

RUMUS_API_END
