#pragma once
// Staging copies between device memory and mapped host buffers, on the
// device's transfer queues (Context::transfer_queue for copies to the host,
// Context::upload_queue for copies to the device: copy engines of their own
// where the device has a transfer-only family, else the compute queue).
//
// Each copy is one submission that waits on the device for what it depends
// on (the compute stream's batch that last wrote its source or used its
// destination, and copies of the other direction on the same memory) and
// signals a value of its queue's timeline, which the host waits for
// (HostBuffer::wait) and which compute batches that touch the same memory
// wait for on the device (Stream::wait_for). Neither side ever waits for the
// other's whole queue. Every wait is for a value already submitted, so a
// shared queue cannot deadlock.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <vector>

#include "allocator.hpp"
#include "context.hpp"

namespace rumus::vulkan {

// A point on another timeline that a staging copy starts after (none when `value` is 0).
struct TransferAfter {
  vk::Semaphore semaphore;
  std::uint64_t value = 0;
};

// The last of a range's staging copies in flight that overlaps bytes
// [begin, end) (0: none), dropping those at or below `done`: what a copy of
// the other direction over those bytes waits for.
std::uint64_t last_overlapping(std::vector<Allocation::StagingCopy>& copies, std::size_t begin, std::size_t end,
                               std::uint64_t done);

class TransferQueue {
 public:
  TransferQueue(Context& ctx, vk::Queue queue);
  ~TransferQueue();
  TransferQueue(const TransferQueue&) = delete;
  TransferQueue& operator=(const TransferQueue&) = delete;

  using After = TransferAfter;
  // Submits one copy that starts once both `after` points are reached;
  // returns the value it signals when done.
  std::uint64_t copy(const Allocation& src, std::size_t src_offset, const Allocation& dst, std::size_t dst_offset,
                     std::size_t nbytes, After after, After also_after = {});
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
  // Records one command buffer with `record` and submits it, waiting for
  // the `after` points.
  template <class Record>
  std::uint64_t submit(Record record, After after, After also_after);

  Context& ctx_;
  vk::Queue queue_;
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
