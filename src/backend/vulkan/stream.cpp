// Command recording, hazard barriers, batched submission and fences.
#include "stream.hpp"

#include "rumus/core/error.hpp"

namespace rumus::vulkan {

namespace {
constexpr auto kStages = vk::PipelineStageFlagBits::eComputeShader | vk::PipelineStageFlagBits::eTransfer;
constexpr auto kAccess = vk::AccessFlagBits::eShaderRead | vk::AccessFlagBits::eShaderWrite |
                         vk::AccessFlagBits::eTransferRead | vk::AccessFlagBits::eTransferWrite;

void full_barrier(vk::CommandBuffer cmd) {
  vk::MemoryBarrier b{.srcAccessMask = kAccess, .dstAccessMask = kAccess};
  cmd.pipelineBarrier(kStages, kStages, {}, b, {}, {});
}
}  // namespace

Stream::Stream(Context& ctx) : ctx_(ctx) {
  pool_ = ctx_.device.createCommandPool(
      {.flags = vk::CommandPoolCreateFlagBits::eResetCommandBuffer, .queueFamilyIndex = ctx_.queue_family});
}

Stream::~Stream() {
  try {
    wait_all();
  } catch (...) {
  }
  for (auto& b : idle_) ctx_.device.destroyFence(b.fence);
  ctx_.device.destroyCommandPool(pool_);
}

vk::CommandBuffer Stream::current() {
  if (active_) return recording_.cmd;
  completed_serial();  // recycles finished batches into idle_
  if (idle_.empty()) {
    Batch b;
    b.cmd = ctx_.device.allocateCommandBuffers(
        {.commandPool = pool_, .level = vk::CommandBufferLevel::ePrimary, .commandBufferCount = 1})[0];
    b.fence = ctx_.device.createFence({});
    idle_.push_back(b);
  }
  recording_ = idle_.back();
  idle_.pop_back();
  recording_.serial = next_serial_;
  recording_.cmd.begin(vk::CommandBufferBeginInfo{.flags = vk::CommandBufferUsageFlagBits::eOneTimeSubmit});
  // Earlier submissions may still write what this batch reads.
  full_barrier(recording_.cmd);
  read_.clear();
  written_.clear();
  active_ = true;
  commands_ = 0;
  return recording_.cmd;
}

void Stream::order(std::span<const Binding> access) {
  bool conflict = false;
  for (auto& b : access) {
    auto k = key(*b.allocation);
    if (written_.count(k) || (b.written && read_.count(k))) conflict = true;
  }
  if (conflict) {
    full_barrier(recording_.cmd);
    read_.clear();
    written_.clear();
  }
  for (auto& b : access) (b.written ? written_ : read_).insert(key(*b.allocation));
}

void Stream::dispatch(vk::Pipeline pipeline, vk::PipelineLayout layout, std::span<const Binding> bindings,
                      const void* push, std::uint32_t push_bytes, std::uint32_t gx, std::uint32_t gy,
                      std::uint32_t gz) {
  vk::CommandBuffer cmd = current();
  order(bindings);
  vk::DescriptorBufferInfo infos[8];
  vk::WriteDescriptorSet writes[8];
  for (std::size_t i = 0; i < bindings.size(); ++i) {
    const Allocation& a = *bindings[i].allocation;
    infos[i] = vk::DescriptorBufferInfo{.buffer = a.buffer, .offset = a.offset, .range = a.size};
    writes[i] = vk::WriteDescriptorSet{.dstBinding = std::uint32_t(i), .descriptorCount = 1,
                 .descriptorType = vk::DescriptorType::eStorageBuffer, .pBufferInfo = &infos[i]};
  }
  cmd.bindPipeline(vk::PipelineBindPoint::eCompute, pipeline);
  cmd.pushDescriptorSetKHR(vk::PipelineBindPoint::eCompute, layout, 0, std::uint32_t(bindings.size()), writes);
  cmd.pushConstants(layout, vk::ShaderStageFlagBits::eCompute, 0, push_bytes, push);
  cmd.dispatch(gx, gy, gz);
  if (++commands_ >= kBatchLimit) submit();
}

void Stream::copy(const Allocation& src, std::size_t src_offset, const Allocation& dst, std::size_t dst_offset,
                  std::size_t nbytes) {
  vk::CommandBuffer cmd = current();
  Binding access[] = {{&src, false}, {&dst, true}};
  order(access);
  vk::BufferCopy region{.srcOffset = src.offset + src_offset, .dstOffset = dst.offset + dst_offset, .size = nbytes};
  cmd.copyBuffer(src.buffer, dst.buffer, region);
  if (++commands_ >= kBatchLimit) submit();
}

void Stream::fill_zero(const Allocation& dst) {
  vk::CommandBuffer cmd = current();
  Binding access[] = {{&dst, true}};
  order(access);
  cmd.fillBuffer(dst.buffer, dst.offset, dst.size, 0);
}

void Stream::submit() {
  if (!active_) return;
  recording_.cmd.end();
  ctx_.queue.submit(vk::SubmitInfo{.commandBufferCount = 1, .pCommandBuffers = &recording_.cmd}, recording_.fence);
  in_flight_.push_back(recording_);
  active_ = false;
  ++next_serial_;
  ++submits_;
}

std::uint64_t Stream::completed_serial() {
  while (!in_flight_.empty() && ctx_.device.getFenceStatus(in_flight_.front().fence) == vk::Result::eSuccess) {
    Batch b = in_flight_.front();
    in_flight_.pop_front();
    ctx_.device.resetFences(b.fence);
    completed_ = b.serial;
    idle_.push_back(b);
  }
  return completed_;
}

void Stream::wait_all() {
  submit();
  if (!in_flight_.empty()) {
    auto r = ctx_.device.waitForFences(in_flight_.back().fence, true, UINT64_MAX);
    if (r != vk::Result::eSuccess) throw DeviceError("vulkan: waiting for the GPU failed on " + ctx_.name);
  }
  completed_serial();
}

}  // namespace rumus::vulkan
