#pragma once
// Sub-allocator over large VkDeviceMemory blocks. Requests round up to size
// classes (quarter steps between powers of two); freed ranges go to their
// class's free list once the GPU work that may still use them has finished.
// Blocks are kept for reuse, like a caching allocator: steady training loops
// reach a fixed footprint.
#include <cstddef>
#include <cstdint>
#include <map>
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
};

class Allocator {
 public:
  Allocator(Context& ctx, bool host_visible, std::size_t block_size);
  ~Allocator();

  Allocation* allocate(std::size_t nbytes);
  // Reusable once the submission with serial `serial` has completed.
  void release(Allocation* a, std::uint64_t serial);
  // Recycles released ranges whose submissions have completed.
  void collect(std::uint64_t completed_serial);

  std::size_t bytes_in_use() const { return in_use_; }
  std::size_t peak_bytes_in_use() const { return peak_; }
  std::size_t bytes_reserved() const { return reserved_; }
  std::size_t blocks() const { return blocks_.size(); }

 private:
  struct Block {
    vk::DeviceMemory memory;
    vk::Buffer buffer;
    std::size_t size = 0, used = 0;
    char* mapped = nullptr;
  };
  struct Pending {
    Allocation* allocation;
    std::uint64_t serial;
  };
  static std::size_t size_class(std::size_t n);
  std::uint32_t new_block(std::size_t size);

  Context& ctx_;
  bool host_visible_;
  std::size_t block_size_, alignment_;
  std::vector<Block> blocks_;
  std::map<std::size_t, std::vector<Allocation*>> free_;  // by size class
  std::vector<Pending> pending_;
  std::size_t in_use_ = 0, peak_ = 0, reserved_ = 0;
};

}  // namespace rumus::vulkan
