// Memory and timelines this device shares with CUDA (../device_interop.hpp).
//
// A shared buffer is a dedicated allocation exported as an opaque fd. Copies
// into and out of it are recorded on the compute stream like any copy, so
// they follow and precede the kernels that use the tensors. CUDA waits on
// the stream's own timeline (exportable where the device shares, see
// Stream's constructor) for the batch that holds a copy_to_shared, which is
// submitted at once; a copy_from_shared's batch waits on the peer timeline
// that CUDA signals (Stream::wait_for).
#include <atomic>
#include <map>
#include <mutex>

#include <fmt/format.h>

#include "../device_interop.hpp"
#include "rumus/core/error.hpp"
#include "rumus/core/storage.hpp"
#include "vulkan_backend.hpp"

namespace rumus::vulkan {

namespace {
// Shared buffers are not blocks of the allocator: ids from the top of the
// range Stream's hazard keys give blocks, far above any allocator's.
std::uint32_t shared_block_id() {
  static std::atomic<std::uint32_t> next{0};
  return (1u << 20) - 1 - next++;
}
}  // namespace

class VulkanInterop;

class VulkanSharedBuffer final : public interop::SharedBuffer {
 public:
  VulkanSharedBuffer(VulkanInterop& owner, const Context& ctx, std::size_t bytes);
  ~VulkanSharedBuffer() override;
  std::size_t size() const override { return allocation_.size; }
  std::size_t allocation_size() const override { return allocation_size_; }
  int export_fd() override {
    return device_.getMemoryFdKHR({.memory = memory_, .handleType = vk::ExternalMemoryHandleTypeFlagBits::eOpaqueFd});
  }
  Allocation& allocation() { return allocation_; }

 private:
  VulkanInterop& owner_;
  vk::Device device_;
  vk::Buffer buffer_;
  vk::DeviceMemory memory_;
  std::size_t allocation_size_ = 0;
  Allocation allocation_;
};

class VulkanPeerTimeline final : public interop::PeerTimeline {
 public:
  explicit VulkanPeerTimeline(vk::Device device) : device_(device) {
    vk::ExportSemaphoreCreateInfo exportable{.handleTypes = vk::ExternalSemaphoreHandleTypeFlagBits::eOpaqueFd};
    vk::SemaphoreTypeCreateInfo type{.pNext = &exportable, .semaphoreType = vk::SemaphoreType::eTimeline,
                                     .initialValue = 0};
    semaphore_ = device_.createSemaphore({.pNext = &type});
  }
  // The owner (NcclGroup) first waits for the work that waits on it.
  ~VulkanPeerTimeline() override { device_.destroySemaphore(semaphore_); }
  int export_fd() override {
    return device_.getSemaphoreFdKHR(
        {.semaphore = semaphore_, .handleType = vk::ExternalSemaphoreHandleTypeFlagBits::eOpaqueFd});
  }
  vk::Semaphore semaphore() const { return semaphore_; }

 private:
  vk::Device device_;
  vk::Semaphore semaphore_;
};

class VulkanInterop final : public interop::DeviceInterop {
 public:
  explicit VulkanInterop(VulkanBackend& be) : be_(be) {}

  std::array<std::uint8_t, 16> uuid() const override { return be_.context().uuid; }

  std::unique_ptr<interop::SharedBuffer> allocate(std::size_t bytes) override {
    return std::make_unique<VulkanSharedBuffer>(*this, be_.context(), bytes);
  }
  std::unique_ptr<interop::PeerTimeline> create_peer_timeline() override {
    return std::make_unique<VulkanPeerTimeline>(be_.context().device);
  }
  int export_device_timeline() override {
    std::lock_guard lk(be_.mu_);
    return be_.context().device.getSemaphoreFdKHR(
        {.semaphore = be_.stream_->timeline(), .handleType = vk::ExternalSemaphoreHandleTypeFlagBits::eOpaqueFd});
  }

  std::uint64_t copy_to_shared(const Storage& src, std::size_t src_offset, interop::SharedBuffer& dst,
                               std::size_t dst_offset, std::size_t nbytes) override {
    Allocation& a = *static_cast<Allocation*>(src.data());
    Allocation& shared = static_cast<VulkanSharedBuffer&>(dst).allocation();
    std::lock_guard lk(be_.mu_);
    be_.check_capture("copy_to_shared", "a collective through NCCL (it runs outside the captured work)");
    be_.touch(a, false);
    be_.touch(shared, true);
    be_.stream_->copy(a, src_offset, shared, dst_offset, nbytes);
    const std::uint64_t serial = be_.stream_->recording_serial();
    be_.stream_->submit();  // the other API may wait only for submitted work
    return serial;
  }

  void copy_from_shared(interop::SharedBuffer& src, std::size_t src_offset, Storage& dst, std::size_t dst_offset,
                        std::size_t nbytes, interop::PeerTimeline& peer, std::uint64_t value) override {
    Allocation& shared = static_cast<VulkanSharedBuffer&>(src).allocation();
    Allocation& a = *static_cast<Allocation*>(dst.data());
    std::lock_guard lk(be_.mu_);
    be_.check_capture("copy_from_shared", "a collective through NCCL (it runs outside the captured work)");
    if (value) be_.stream_->wait_for(static_cast<VulkanPeerTimeline&>(peer).semaphore(), value);
    be_.touch(shared, false);
    be_.touch(a, true);
    be_.stream_->copy(shared, src_offset, a, dst_offset, nbytes);
  }

  // A shared buffer's memory goes back once the copies queued on it are done.
  void retire(Allocation& shared) {
    std::lock_guard lk(be_.mu_);
    if (shared.used_serial >= be_.stream_->recording_serial()) be_.stream_->submit();
    if (shared.used_serial > be_.stream_->completed_serial()) be_.stream_->wait_all();
  }

 private:
  VulkanBackend& be_;
};

VulkanSharedBuffer::VulkanSharedBuffer(VulkanInterop& owner, const Context& ctx, std::size_t bytes)
    : owner_(owner), device_(ctx.device) {
  const auto fd = vk::ExternalMemoryHandleTypeFlagBits::eOpaqueFd;
  vk::ExternalMemoryBufferCreateInfo external{.handleTypes = fd};
  buffer_ = device_.createBuffer({.pNext = &external,
                                  .size = bytes,
                                  .usage = vk::BufferUsageFlagBits::eStorageBuffer |
                                           vk::BufferUsageFlagBits::eTransferSrc |
                                           vk::BufferUsageFlagBits::eTransferDst,
                                  .sharingMode = vk::SharingMode::eExclusive});
  const vk::MemoryRequirements need = device_.getBufferMemoryRequirements(buffer_);
  // Dedicated: CUDA imports the allocation whole (cudaExternalMemoryDedicated).
  vk::MemoryDedicatedAllocateInfo dedicated{.buffer = buffer_};
  vk::ExportMemoryAllocateInfo exportable{.pNext = &dedicated, .handleTypes = fd};
  try {
    memory_ = device_.allocateMemory(
        {.pNext = &exportable,
         .allocationSize = need.size,
         .memoryTypeIndex = ctx.memory_type(need.memoryTypeBits, vk::MemoryPropertyFlagBits::eDeviceLocal)});
  } catch (const vk::SystemError& e) {
    device_.destroyBuffer(buffer_);
    throw DeviceError(fmt::format("vulkan: cannot allocate {} bytes of shared device memory: {}", bytes, e.what()));
  }
  device_.bindBufferMemory(buffer_, memory_, 0);
  allocation_size_ = need.size;
  allocation_.buffer = buffer_;
  allocation_.size = bytes;
  allocation_.block = shared_block_id();
}

VulkanSharedBuffer::~VulkanSharedBuffer() {
  try {
    owner_.retire(allocation_);
  } catch (...) {  // a lost device: free anyway
  }
  device_.destroyBuffer(buffer_);
  device_.freeMemory(memory_);
}

interop::DeviceInterop* device_interop(Device device, std::string* why) {
  auto& be = dynamic_cast<VulkanBackend&>(rumus::device_backend(device));
  if (!be.context().external_sharing) {
    if (why)
      *why = fmt::format("{} ({}) does not export memory and timeline semaphores as fds "
                         "(VK_KHR_external_memory_fd, VK_KHR_external_semaphore_fd)",
                         device.str(), be.context().name);
    return nullptr;
  }
  static std::mutex mu;
  static std::map<int, std::unique_ptr<VulkanInterop>> interops;  // by device index, alive for the process
  std::lock_guard lk(mu);
  auto& slot = interops[device.index];
  if (!slot) slot = std::make_unique<VulkanInterop>(be);
  return slot.get();
}

}  // namespace rumus::vulkan
