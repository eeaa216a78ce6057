// The transfer queue's submissions and its timeline semaphore.
#include "transfer.hpp"

#include <algorithm>
#include <chrono>
#include <thread>

#include "rumus/core/error.hpp"

namespace rumus::vulkan {

TransferQueue::TransferQueue(Context& ctx, vk::Queue queue) : ctx_(ctx), queue_(queue) {
  pool_ = ctx_.device.createCommandPool(
      {.flags = vk::CommandPoolCreateFlagBits::eResetCommandBuffer, .queueFamilyIndex = ctx_.transfer_family});
  vk::SemaphoreTypeCreateInfo type{.semaphoreType = vk::SemaphoreType::eTimeline, .initialValue = 0};
  timeline_ = ctx_.device.createSemaphore({.pNext = &type});
}

TransferQueue::~TransferQueue() {
  try {
    wait(submitted());
  } catch (...) {
  }
  ctx_.device.destroyCommandPool(pool_);  // frees its command buffers
  ctx_.device.destroySemaphore(timeline_);
}

template <class Record>
std::uint64_t TransferQueue::submit(Record record, After after, After also_after) {
  poll();
  vk::CommandBuffer cmd;
  if (idle_.empty()) {
    cmd = ctx_.device.allocateCommandBuffers(
        {.commandPool = pool_, .level = vk::CommandBufferLevel::ePrimary, .commandBufferCount = 1})[0];
  } else {
    cmd = idle_.back();
    idle_.pop_back();
  }
  cmd.begin(vk::CommandBufferBeginInfo{.flags = vk::CommandBufferUsageFlagBits::eOneTimeSubmit});
  // Earlier commands on this queue may read what this one writes (a host
  // buffer reused), or write what it reads.
  const auto copies = vk::AccessFlagBits::eTransferRead | vk::AccessFlagBits::eTransferWrite;
  vk::MemoryBarrier before{.srcAccessMask = copies, .dstAccessMask = copies};
  cmd.pipelineBarrier(vk::PipelineStageFlagBits::eTransfer, vk::PipelineStageFlagBits::eTransfer, {}, before, {}, {});
  record(cmd);
  // A semaphore makes device writes available, not visible to the host: the
  // host reads a mapped buffer only after this barrier.
  vk::MemoryBarrier to_host{.srcAccessMask = vk::AccessFlagBits::eTransferWrite, .dstAccessMask = vk::AccessFlagBits::eHostRead};
  cmd.pipelineBarrier(vk::PipelineStageFlagBits::eTransfer, vk::PipelineStageFlagBits::eHost, {}, to_host, {}, {});
  cmd.end();

  const std::uint64_t value = next_;
  vk::Semaphore wait_semaphores[2];
  std::uint64_t wait_values[2];
  std::uint32_t waits = 0;
  for (const After& a : {after, also_after})
    if (a.value) wait_semaphores[waits] = a.semaphore, wait_values[waits++] = a.value;
  const vk::PipelineStageFlags wait_stages[2] = {vk::PipelineStageFlagBits::eTransfer,
                                                 vk::PipelineStageFlagBits::eTransfer};
  vk::TimelineSemaphoreSubmitInfo values{.waitSemaphoreValueCount = waits,
                                         .pWaitSemaphoreValues = wait_values,
                                         .signalSemaphoreValueCount = 1,
                                         .pSignalSemaphoreValues = &value};
  queue_.submit(vk::SubmitInfo{.pNext = &values,
                               .waitSemaphoreCount = waits,
                               .pWaitSemaphores = wait_semaphores,
                               .pWaitDstStageMask = wait_stages,
                               .commandBufferCount = 1,
                               .pCommandBuffers = &cmd,
                               .signalSemaphoreCount = 1,
                               .pSignalSemaphores = &timeline_});
  ++next_;
  in_flight_.push_back({cmd, value});
  return value;
}

std::uint64_t last_overlapping(std::vector<Allocation::StagingCopy>& copies, std::size_t begin, std::size_t end,
                               std::uint64_t done) {
  std::erase_if(copies, [done](const Allocation::StagingCopy& c) { return c.value <= done; });
  std::uint64_t last = 0;
  for (const Allocation::StagingCopy& c : copies)
    if (c.begin < end && begin < c.end) last = std::max(last, c.value);
  return last;
}

std::uint64_t TransferQueue::copy(const Allocation& src, std::size_t src_offset, const Allocation& dst,
                                  std::size_t dst_offset, std::size_t nbytes, After after, After also_after) {
  return submit(
      [&](vk::CommandBuffer cmd) {
        cmd.copyBuffer(src.buffer, dst.buffer,
                       vk::BufferCopy{.srcOffset = src.offset + src_offset, .dstOffset = dst.offset + dst_offset,
                                      .size = nbytes});
      },
      after, also_after);
}

std::uint64_t TransferQueue::fill(const Allocation& dst, std::size_t offset, std::size_t nbytes, std::uint32_t value) {
  return submit([&](vk::CommandBuffer cmd) { cmd.fillBuffer(dst.buffer, dst.offset + offset, nbytes, value); }, {}, {});
}

void TransferQueue::note_completed(std::uint64_t value) {
  std::uint64_t known = known_.load(std::memory_order_relaxed);
  while (value > known && !known_.compare_exchange_weak(known, value, std::memory_order_release)) {
  }
}

std::uint64_t TransferQueue::poll() {
  if (in_flight_.empty()) return known_completed();
  note_completed(ctx_.device.getSemaphoreCounterValue(timeline_));
  const std::uint64_t done = known_completed();
  while (!in_flight_.empty() && in_flight_.front().value <= done) {
    in_flight_.front().cmd.reset();
    idle_.push_back(in_flight_.front().cmd);
    in_flight_.pop_front();
  }
  return done;
}

void TransferQueue::wait(std::uint64_t value) {
  if (value <= known_completed()) return;
  // A staging copy takes tens of microseconds: polling the counter that long
  // answers sooner than a blocking wait wakes up. Longer waits block.
  const auto until = std::chrono::steady_clock::now() + kPoll;
  do {
    const std::uint64_t done = ctx_.device.getSemaphoreCounterValue(timeline_);
    if (done >= value) {
      note_completed(done);
      return;
    }
    std::this_thread::yield();
  } while (std::chrono::steady_clock::now() < until);
  auto r = ctx_.device.waitSemaphores(vk::SemaphoreWaitInfo{.semaphoreCount = 1, .pSemaphores = &timeline_,
                                                            .pValues = &value},
                                      UINT64_MAX);
  if (r != vk::Result::eSuccess) throw DeviceError("vulkan: waiting for a staging copy failed on " + ctx_.name);
  note_completed(value);
}

}  // namespace rumus::vulkan
