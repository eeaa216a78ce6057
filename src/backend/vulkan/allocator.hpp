#pragma once
// Sub-allocator over large VkDeviceMemory blocks. Requests round up to size
// classes (quarter steps between powers of two); freed ranges go to their
// class's free list once the GPU work that may still use them has finished.
// Blocks are kept for reuse, like a caching allocator: steady training loops
// reach a fixed footprint. When the device has no memory left for a new
// block (or the block would pass the process's limit), the allocator asks
// its owner to wait for the work in flight, returns the blocks no live
// range is left in, and tries once more before it reports the failure.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "context.hpp"
#include "../backend.hpp"

namespace rumus::vulkan {

struct Allocation {
  vk::Buffer buffer;       // the block's buffer
  std::size_t offset = 0;  // bytes into it
  std::size_t size = 0;    // size class (bytes)
  void* mapped = nullptr;  // host pointer for host-visible memory
  std::uint32_t block = 0;
  // What a staging copy waits for, and what waits for it (VulkanBackend):
  // the compute serials of the last batch that used and that wrote this
  // range, and the values of the last staging copy to the host and to the
  // device that touched it, each on its queue's timeline (a device range is
  // read by downloads and written by uploads, a host buffer the reverse).
  // Stale values from an earlier owner of the range are older, so at worst
  // they order too much, never too little.
  std::uint64_t used_serial = 0, written_serial = 0;
  std::uint64_t last_download = 0, last_upload = 0;
  // A device range's staging copies not known done, by the bytes they
  // cover, so a copy of the other direction waits only for those it
  // overlaps: a tensor's first piece goes back while its later pieces still
  // come to the host.
  struct StagingCopy {
    std::size_t begin, end;
    std::uint64_t value;
  };
  std::vector<StagingCopy> downloads, uploads;
};

class Allocator {
 public:
  // `limit`: the most bytes of blocks this allocator may hold (0: as many as the device gives).
  // `reclaim`: waits for the device's work in flight and collects what it released.
  Allocator(Context& ctx, bool host_visible, std::size_t block_size, std::size_t limit = 0,
            std::function<void()> reclaim = {});
  ~Allocator();

  Allocation* allocate(std::size_t nbytes);
  // Reusable once the submission with serial `serial` has completed.
  void release(Allocation* a, std::uint64_t serial);
  // Recycles released ranges whose submissions have completed.
  void collect(std::uint64_t completed_serial);

  std::size_t bytes_in_use() const { return in_use_; }
  std::size_t peak_bytes_in_use() const { return peak_; }
  std::size_t bytes_reserved() const { return reserved_; }
  std::size_t blocks() const;  // held now
  // Frees the blocks whose every range is on a free list; returns the bytes freed.
  std::size_t trim();

 private:
  struct Block {
    vk::DeviceMemory memory;
    vk::Buffer buffer;
    std::size_t size = 0, used = 0;
    char* mapped = nullptr;
    std::uint32_t ranges = 0, free_ranges = 0;  // ranges cut from it, and how many of them are on free lists
  };
  struct Pending {
    Allocation* allocation;
    std::uint64_t serial;
  };
  static std::size_t size_class(std::size_t n);
  // An index into blocks_, or ~0u when the device (or the limit) refuses; why is in refusal_.
  std::uint32_t new_block(std::size_t size);
  Allocation* try_allocate(std::size_t size);

  Context& ctx_;
  bool host_visible_;
  std::size_t block_size_, alignment_, limit_;
  std::function<void()> reclaim_;
  std::string refusal_;
  std::vector<Block> blocks_;
  std::map<std::size_t, std::vector<Allocation*>> free_;  // by size class
  std::vector<Pending> pending_;
  std::size_t in_use_ = 0, peak_ = 0, reserved_ = 0;
};

}  // namespace rumus::vulkan
