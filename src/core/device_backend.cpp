// The staging half of DeviceBackend: argument checks shared by every device,
// and the defaults for devices whose memory the host addresses.
#include "rumus/core/device_backend.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>

#include "rumus/core/error.hpp"
#include "rumus/core/storage.hpp"

namespace rumus {

namespace {

// Plain host memory, aligned for any dtype and for vector loads.
class PlainHostBuffer final : public HostBuffer {
 public:
  static constexpr std::size_t kAlign = 64;
  PlainHostBuffer(Device device, std::size_t nbytes) : HostBuffer(device, allocate(nbytes), nbytes) {}
  ~PlainHostBuffer() override { std::free(data()); }

 private:
  static void* allocate(std::size_t nbytes) {
    void* p = std::aligned_alloc(kAlign, (std::max<std::size_t>(nbytes, 1) + kAlign - 1) / kAlign * kAlign);
    if (!p) throw OutOfMemoryError(fmt::format("allocate_host: no host memory for {} bytes", nbytes));
    return p;
  }
};

void check_range(const char* op, const char* what, std::size_t offset, std::size_t nbytes, std::size_t size) {
  if (offset > size || nbytes > size - offset)
    throw ValueError(fmt::format("{}: bytes [{}, {}) are outside the {} of {} bytes", op, offset, offset + nbytes, what,
                                 size));
}

void check_devices(const char* op, Device backend, const Storage& storage, const HostBuffer& buffer) {
  if (storage.device() != backend)
    throw DeviceError(fmt::format("{}: the storage is on {}, not on this backend's device {}", op, storage.device().str(),
                                  backend.str()));
  if (buffer.device() != backend)
    throw DeviceError(fmt::format("{}: the host buffer belongs to {}, not to {}", op, buffer.device().str(),
                                  backend.str()));
}

}  // namespace

std::unique_ptr<HostBuffer> DeviceBackend::allocate_host(std::size_t nbytes) { return make_host_buffer(nbytes); }

void DeviceBackend::copy_to_host(const Storage& src, std::size_t src_offset, HostBuffer& dst, std::size_t dst_offset,
                                 std::size_t nbytes) {
  check_devices("copy_to_host", device(), src, dst);
  check_range("copy_to_host", "storage", src_offset, nbytes, src.nbytes());
  check_range("copy_to_host", "host buffer", dst_offset, nbytes, dst.size());
  if (nbytes > 0) queue_copy_to_host(src, src_offset, dst, dst_offset, nbytes);
}

void DeviceBackend::copy_from_host(HostBuffer& src, std::size_t src_offset, Storage& dst, std::size_t dst_offset,
                                   std::size_t nbytes) {
  check_devices("copy_from_host", device(), dst, src);
  check_range("copy_from_host", "host buffer", src_offset, nbytes, src.size());
  check_range("copy_from_host", "storage", dst_offset, nbytes, dst.nbytes());
  if (nbytes > 0) queue_copy_from_host(src, src_offset, dst, dst_offset, nbytes);
}

std::unique_ptr<HostBuffer> DeviceBackend::make_host_buffer(std::size_t nbytes) {
  return std::make_unique<PlainHostBuffer>(device(), nbytes);
}

void DeviceBackend::queue_copy_to_host(const Storage& src, std::size_t src_offset, HostBuffer& dst,
                                       std::size_t dst_offset, std::size_t nbytes) {
  read(src, src_offset, static_cast<char*>(dst.data()) + dst_offset, nbytes);
}

void DeviceBackend::queue_copy_from_host(HostBuffer& src, std::size_t src_offset, Storage& dst, std::size_t dst_offset,
                                         std::size_t nbytes) {
  write(dst, dst_offset, static_cast<const char*>(src.data()) + src_offset, nbytes);
}

}  // namespace rumus
