#pragma once
// Staging copies between device memory and mapped host buffers, on the
// device's transfer queue (Context::transfer_queue: the copy engines where
// the device has a transfer-only family, else the compute queue itself).
//
// Each copy is one submission that waits on the compute stream's timeline
// for the batch it depends on (the last write to its source, or the last use
// of its destination) and signals a value of its own timeline, which the
// host waits for (HostBuffer::wait) and which compute batches that touch the
// same memory wait for on the device (Stream::wait_for). Neither side ever
// waits for the other's whole queue. Every wait is for a value already
// submitted, so a shared queue cannot deadlock.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <vector>

#include "allocator.hpp"
#include "context.hpp"

namespace rumus::vulkan {

class TransferQueue {
 public:
  explicit TransferQueue(Context& ctx);
  ~TransferQueue();
  TransferQueue(const TransferQueue&) = delete;
  TransferQueue& operator=(const TransferQueue&) = delete;

  // Submits one copy that starts once `after_semaphore` reaches `after_value`
  // (no wait when `after_value` is 0); returns the value it signals when done.
  std::uint64_t copy(const Allocation& src, std::size_t src_offset, const Allocation& dst, std::size_t dst_offset,
                     std::size_t nbytes, vk::Semaphore after_semaphore, std::uint64_t after_value);
  // Submits a fill of `nbytes` of `dst` with the word `value`, ordered after
  // nothing; returns the value it signals when done.
  std::uint64_t fill(const Allocation& dst, std::size_t offset, std::size_t nbytes, std::uint32_t value);
  vk::Semaphore timeline() const { return timeline_; }
  // The largest value known to be signalled (cheap: no query).
  std::uint64_t known_completed() const { return known_.load(std::memory_order_acquire); }
  // Asks the device (one query), recycles finished command buffers.
  std::uint64_t poll();
  // Blocks until `value` is signalled (polling for up to kPoll first).
  // Thread-safe without the owner's lock.
  void wait(std::uint64_t value);
  static constexpr std::chrono::microseconds kPoll{200};
  std::uint64_t submitted() const { return next_ - 1; }

 private:
  void note_completed(std::uint64_t value);
  // Records one command buffer with `record` and submits it (waiting on
  // `after_semaphore` for `after_value` unless that is 0).
  template <class Record>
  std::uint64_t submit(Record record, vk::Semaphore after_semaphore, std::uint64_t after_value);

  Context& ctx_;
  vk::CommandPool pool_;
  vk::Semaphore timeline_;
  struct Pending {
    vk::CommandBuffer cmd;
    std::uint64_t value;
  };
  std::deque<Pending> in_flight_;
  std::vector<vk::CommandBuffer> idle_;
  std::uint64_t next_ = 1;
  std::atomic<std::uint64_t> known_{0};
};

}  // namespace rumus::vulkan
