// Size-class sub-allocation with deferred reuse.
#include "allocator.hpp"

#include <algorithm>
#include <bit>

#include "rumus/core/error.hpp"

namespace rumus::vulkan {

Allocator::Allocator(Context& ctx, bool host_visible, std::size_t block_size, std::size_t limit,
                     std::function<void()> reclaim)
    : ctx_(ctx), host_visible_(host_visible), block_size_(block_size), limit_(limit), reclaim_(std::move(reclaim)) {
  // Every range starts on a boundary valid for storage-buffer bindings and vec4 loads.
  alignment_ = std::max<std::size_t>(256, ctx.properties.limits.minStorageBufferOffsetAlignment);
}

Allocator::~Allocator() {
  for (auto& [size, list] : free_)
    for (Allocation* a : list) delete a;
  for (auto& p : pending_) delete p.allocation;
  for (auto& b : blocks_) {
    ctx_.device.destroyBuffer(b.buffer);
    ctx_.device.freeMemory(b.memory);
  }
}

std::size_t Allocator::size_class(std::size_t n) {
  if (n <= 256) return 256;
  // Quarter steps between powers of two: at most 25% slack.
  std::size_t top = std::bit_floor(n - 1);
  std::size_t quarter = std::max<std::size_t>(top / 4, 1);
  return (n + quarter - 1) / quarter * quarter;
}

std::uint32_t Allocator::new_block(std::size_t size) {
  if (limit_ && reserved_ + size > limit_) {
    refusal_ = "the limit of " + std::to_string(limit_) + " bytes (RUMUS_VULKAN_MEMORY_LIMIT_MIB) would be passed";
    return ~0u;
  }
  vk::BufferUsageFlags usage = vk::BufferUsageFlagBits::eStorageBuffer | vk::BufferUsageFlagBits::eTransferSrc |
                               vk::BufferUsageFlagBits::eTransferDst;
  Block b;
  b.size = size;
  // Staging copies may run on a transfer queue of another family: both may use every buffer.
  const std::uint32_t families[] = {ctx_.queue_family, ctx_.transfer_family};
  vk::BufferCreateInfo info{.size = size, .usage = usage};
  if (ctx_.separate_transfer()) {
    info.sharingMode = vk::SharingMode::eConcurrent;
    info.queueFamilyIndexCount = 2;
    info.pQueueFamilyIndices = families;
  }
  b.buffer = ctx_.device.createBuffer(info);
  auto req = ctx_.device.getBufferMemoryRequirements(b.buffer);
  std::uint32_t type =
      host_visible_
          ? ctx_.memory_type(req.memoryTypeBits,
                             vk::MemoryPropertyFlagBits::eHostVisible | vk::MemoryPropertyFlagBits::eHostCoherent,
                             vk::MemoryPropertyFlagBits::eHostCached)
          : ctx_.memory_type(req.memoryTypeBits, vk::MemoryPropertyFlagBits::eDeviceLocal);
  try {
    b.memory = ctx_.device.allocateMemory(vk::MemoryAllocateInfo{.allocationSize = req.size, .memoryTypeIndex = type});
  } catch (const vk::SystemError& e) {
    ctx_.device.destroyBuffer(b.buffer);
    const auto& heap = ctx_.memory.memoryHeaps[ctx_.memory.memoryTypes[type].heapIndex];
    refusal_ = "memory type " + std::to_string(type) + " on a heap of " + std::to_string(heap.size) +
               " bytes: " + e.what();
    return ~0u;
  }
  ctx_.device.bindBufferMemory(b.buffer, b.memory, 0);
  if (host_visible_) b.mapped = static_cast<char*>(ctx_.device.mapMemory(b.memory, 0, size));
  blocks_.push_back(b);
  reserved_ += size;
  return std::uint32_t(blocks_.size() - 1);
}

Allocation* Allocator::allocate(std::size_t nbytes) {
  const std::size_t size = size_class(nbytes);
  const std::size_t limit = ctx_.properties.limits.maxStorageBufferRange;
  if (nbytes > limit)
    throw DeviceError("vulkan: a tensor of " + std::to_string(nbytes) + " bytes exceeds " + ctx_.name +
                      "'s maxStorageBufferRange of " + std::to_string(limit) + " bytes");
  Allocation* a = try_allocate(size);
  if (!a) {
    // Out of memory: what the work in flight released, and the blocks left
    // with no live range, make room before giving up (as a caching allocator
    // empties its cache and retries).
    if (reclaim_) reclaim_();
    trim();
    a = try_allocate(size);
  }
  if (!a) {
    std::size_t pending = 0;
    for (const Pending& p : pending_) pending += p.allocation->size;
    throw DeviceError("vulkan: out of device memory on " + ctx_.name + " allocating " + std::to_string(nbytes) +
                      " bytes (" + std::to_string(in_use_) + " bytes in use, " + std::to_string(pending) +
                      " released but still read by work in flight, " + std::to_string(reserved_) +
                      " held in blocks): " + refusal_);
  }
  in_use_ += a->size;
  peak_ = std::max(peak_, in_use_);
  return a;
}

Allocation* Allocator::try_allocate(std::size_t size) {
  if (auto it = free_.find(size); it != free_.end() && !it->second.empty()) {
    Allocation* a = it->second.back();
    it->second.pop_back();
    --blocks_[a->block].free_ranges;
    return a;
  }
  std::uint32_t index = ~0u;
  if (size <= block_size_ / 2) {
    // Bump-allocate from the newest shared block, or open a new one.
    for (std::uint32_t i = std::uint32_t(blocks_.size()); i-- > 0;) {
      Block& b = blocks_[i];
      if (b.size == block_size_ && (b.used + alignment_ - 1) / alignment_ * alignment_ + size <= b.size) {
        index = i;
        break;
      }
    }
    if (index == ~0u) index = new_block(block_size_);
  } else {
    index = new_block((size + alignment_ - 1) / alignment_ * alignment_);  // large: a block of its own
  }
  if (index == ~0u) return nullptr;
  Block& b = blocks_[index];
  std::size_t offset = (b.used + alignment_ - 1) / alignment_ * alignment_;
  b.used = offset + size;
  ++b.ranges;
  return new Allocation{b.buffer, offset, size, b.mapped ? b.mapped + offset : nullptr, index};
}

std::size_t Allocator::trim() {
  std::size_t freed = 0;
  for (std::uint32_t i = 0; i < blocks_.size(); ++i) {
    Block& b = blocks_[i];
    if (!b.memory || b.ranges == 0 || b.free_ranges != b.ranges) continue;
    for (auto& [size, list] : free_)
      std::erase_if(list, [&](Allocation* a) {
        if (a->block != i) return false;
        delete a;
        return true;
      });
    ctx_.device.destroyBuffer(b.buffer);
    ctx_.device.freeMemory(b.memory);
    reserved_ -= b.size;
    freed += b.size;
    b = Block{};  // the index stays taken: the stream keys its hazards by block and offset
  }
  return freed;
}

std::size_t Allocator::blocks() const {
  return std::size_t(std::count_if(blocks_.begin(), blocks_.end(), [](const Block& b) { return bool(b.memory); }));
}

void Allocator::release(Allocation* a, std::uint64_t serial) {
  in_use_ -= a->size;
  pending_.push_back({a, serial});
}

void Allocator::collect(std::uint64_t completed) {
  auto done = std::stable_partition(pending_.begin(), pending_.end(),
                                    [&](const Pending& p) { return p.serial > completed; });
  for (auto it = done; it != pending_.end(); ++it) {
    free_[it->allocation->size].push_back(it->allocation);
    ++blocks_[it->allocation->block].free_ranges;
  }
  pending_.erase(done, pending_.end());
}

}  // namespace rumus::vulkan
