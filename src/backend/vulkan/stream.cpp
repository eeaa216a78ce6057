// Command recording, hazard barriers, batched submission and fences.
#include "stream.hpp"

#include "../../core/env.hpp"
#include "pipelines.hpp"

#include <algorithm>

#include <cstdio>
#include <cstdlib>
#include <utility>
#include <vector>

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
  profile_ = env::on("RUMUS_VULKAN_PROFILE");
  // Timestamps need the queue's support; their counter wraps at its valid bits.
  const std::uint32_t valid_bits = ctx_.physical.getQueueFamilyProperties()[ctx_.queue_family].timestampValidBits;
  if (!ctx_.properties.limits.timestampComputeAndGraphics || valid_bits == 0) profile_ = false;
  tick_mask_ = valid_bits >= 64 ? ~std::uint64_t(0) : (std::uint64_t(1) << valid_bits) - 1;
  pool_ = ctx_.device.createCommandPool(
      {.flags = vk::CommandPoolCreateFlagBits::eResetCommandBuffer, .queueFamilyIndex = ctx_.queue_family});
  vk::SemaphoreTypeCreateInfo type{.semaphoreType = vk::SemaphoreType::eTimeline, .initialValue = 0};
  // Exportable where the device shares with other APIs: CUDA waits on it (interop.cpp).
  vk::ExportSemaphoreCreateInfo exportable{.handleTypes = vk::ExternalSemaphoreHandleTypeFlagBits::eOpaqueFd};
  if (ctx_.external_sharing) type.pNext = &exportable;
  timeline_ = ctx_.device.createSemaphore({.pNext = &type});
}

Stream::~Stream() {
  try {
    wait_all();
  } catch (...) {
  }
  for (vk::Fence f : spare_fences_) ctx_.device.destroyFence(f);
  for (auto& t : replay_timers_) ctx_.device.destroyQueryPool(t.queries);
  for (auto& b : idle_) {
    ctx_.device.destroyFence(b.fence);
    if (b.queries) ctx_.device.destroyQueryPool(b.queries);
  }
  ctx_.device.destroyCommandPool(pool_);
  ctx_.device.destroySemaphore(timeline_);
}

vk::CommandBuffer Stream::current() {
  if (capturing_) return capture_cmd_;
  if (active_) return recording_.cmd;
  completed_serial();  // recycles finished batches into idle_
  if (idle_.empty()) {
    Batch b;
    b.cmd = ctx_.device.allocateCommandBuffers(
        {.commandPool = pool_, .level = vk::CommandBufferLevel::ePrimary, .commandBufferCount = 1})[0];
    b.fence = ctx_.device.createFence({});
    if (profile_)
      b.queries = ctx_.device.createQueryPool(
          {.queryType = vk::QueryType::eTimestamp, .queryCount = kBatchLimit + 1});
    idle_.push_back(b);
  }
  recording_ = idle_.back();
  idle_.pop_back();
  recording_.serial = next_serial_;
  recording_.cmd.begin(vk::CommandBufferBeginInfo{.flags = vk::CommandBufferUsageFlagBits::eOneTimeSubmit});
  if (profile_) {
    recording_.labels.assign(1, "start");
    recording_.cmd.resetQueryPool(recording_.queries, 0, kBatchLimit + 1);
    recording_.cmd.writeTimestamp(vk::PipelineStageFlagBits::eBottomOfPipe, recording_.queries, 0);
  }
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
    full_barrier(capturing_ ? capture_cmd_ : recording_.cmd);  // into the buffer being recorded
    ++profile_barriers_;
    read_.clear();
    written_.clear();
  }
  for (auto& b : access) (b.written ? written_ : read_).insert(key(*b.allocation));
}

void Stream::dispatch(vk::Pipeline pipeline, vk::PipelineLayout layout, std::span<const Binding> bindings,
                      const void* push, std::uint32_t push_bytes, std::uint32_t gx, std::uint32_t gy,
                      std::uint32_t gz, const std::string* label) {
  vk::CommandBuffer cmd = current();
  order(bindings);
  vk::DescriptorBufferInfo infos[kMaxBindings];
  vk::WriteDescriptorSet writes[kMaxBindings];
  if (bindings.size() > kMaxBindings) throw Error("dispatch: more bindings than the pipeline layout has");
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
  if (capturing_) return;  // one buffer per capture; no timestamps in it
  if (profile_) {
    recording_.labels.push_back(label ? *label : "?");
    ++profile_dispatches_;
    cmd.writeTimestamp(vk::PipelineStageFlagBits::eBottomOfPipe, recording_.queries,
                       std::uint32_t(recording_.labels.size() - 1));
  }
  after_command();
}

void Stream::after_command() {
  ++commands_total_;
  if (++commands_ >= kBatchLimit) return submit();
  // A device with nothing left to run would wait for the whole batch: after
  // a host read, until the host has recorded up to the next one.
  if (commands_ % kIdleCheck == 0 && (completed_serial(), in_flight_.empty())) submit();
}

void Stream::copy(const Allocation& src, std::size_t src_offset, const Allocation& dst, std::size_t dst_offset,
                  std::size_t nbytes) {
  vk::CommandBuffer cmd = current();
  Binding access[] = {{&src, false}, {&dst, true}};
  order(access);
  vk::BufferCopy region{.srcOffset = src.offset + src_offset, .dstOffset = dst.offset + dst_offset, .size = nbytes};
  cmd.copyBuffer(src.buffer, dst.buffer, region);
  if (capturing_) return;
  after_command();
}

void Stream::timestamp(vk::QueryPool pool, std::uint32_t query) {
  vk::CommandBuffer cmd = current();
  cmd.resetQueryPool(pool, query, 1);
  cmd.writeTimestamp(vk::PipelineStageFlagBits::eBottomOfPipe, pool, query);
}

void Stream::throttle(bool replay) {
  // The host may run ahead of the GPU by a few batches, not more: memory freed
  // meanwhile is reused only when the batches that used it finish.
  for (;;) {
    const auto replays = std::size_t(std::count_if(in_flight_.begin(), in_flight_.end(),
                                                   [](const Batch& b) { return b.captured; }));
    if (replay ? replays < kMaxReplaysInFlight : in_flight_.size() - replays < kMaxInFlight) return;
    auto r = ctx_.device.waitForFences(in_flight_.front().fence, true, UINT64_MAX);
    if (r != vk::Result::eSuccess) throw DeviceError("vulkan: waiting for the GPU failed on " + ctx_.name);
    completed_serial();
  }
}

void Stream::wait_for(vk::Semaphore semaphore, std::uint64_t value) {
  // A timeline's larger value covers the smaller.
  for (std::size_t i = 0; i < wait_semaphores_.size(); ++i)
    if (wait_semaphores_[i] == semaphore) {
      wait_values_[i] = std::max(wait_values_[i], value);
      return;
    }
  wait_semaphores_.push_back(semaphore);
  wait_values_.push_back(value);
}

void Stream::queue_submit(std::span<const vk::CommandBuffer> cmds, vk::Fence fence, std::uint64_t serial) {
  const std::vector<vk::Semaphore> semaphores = std::exchange(wait_semaphores_, {});
  const std::vector<std::uint64_t> values = std::exchange(wait_values_, {});
  const std::vector<vk::PipelineStageFlags> stages(semaphores.size(), vk::PipelineStageFlagBits::eAllCommands);
  const auto waits = std::uint32_t(semaphores.size());
  vk::TimelineSemaphoreSubmitInfo timeline_values{.waitSemaphoreValueCount = waits,
                                                  .pWaitSemaphoreValues = values.data(),
                                                  .signalSemaphoreValueCount = 1,
                                                  .pSignalSemaphoreValues = &serial};
  ctx_.queue.submit(vk::SubmitInfo{.pNext = &timeline_values,
                                   .waitSemaphoreCount = waits,
                                   .pWaitSemaphores = semaphores.data(),
                                   .pWaitDstStageMask = stages.data(),
                                   .commandBufferCount = std::uint32_t(cmds.size()),
                                   .pCommandBuffers = cmds.data(),
                                   .signalSemaphoreCount = 1,
                                   .pSignalSemaphores = &timeline_},
                    fence);
}

void Stream::submit() {
  if (!active_) return;
  throttle(false);
  recording_.cmd.end();
  queue_submit({&recording_.cmd, 1}, recording_.fence, recording_.serial);
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
    if (b.captured) {
      spare_fences_.push_back(b.fence);
      if (b.timer >= 0) collect_replay_time(b);
      continue;
    }
    if (profile_) collect_profile(b);
    idle_.push_back(b);
  }
  // Idle (nothing in flight, nothing recorded): what was released under the
  // serial now recording is read by no work, so it counts as completed too.
  if (in_flight_.empty() && !active_ && !capturing_) return next_serial_;
  return completed_;
}

void Stream::wait_all() {
  ++drains_;
  submit();
  if (!in_flight_.empty()) {
    auto r = ctx_.device.waitForFences(in_flight_.back().fence, true, UINT64_MAX);
    if (r != vk::Result::eSuccess) throw DeviceError("vulkan: waiting for the GPU failed on " + ctx_.name);
  }
  completed_serial();
  if (profile_ && !profile_totals_.empty()) {
    std::vector<std::pair<double, std::string>> rows;
    double total = 0;
    for (auto& [label, t] : profile_totals_) {
      rows.push_back({t.first, label + " x" + std::to_string(t.second)});
      total += t.first;
    }
    std::sort(rows.rbegin(), rows.rend());
    std::fprintf(stderr, "vulkan profile (%s): %.3f ms of kernels, %llu dispatches, %llu barriers between them\n",
                 ctx_.name.c_str(), total, (unsigned long long)profile_dispatches_, (unsigned long long)profile_barriers_);
    for (std::size_t i = 0; i < rows.size() && i < 60; ++i)
      std::fprintf(stderr, "  %9.3f ms  %s\n", rows[i].first, rows[i].second.c_str());
    profile_totals_.clear();
    profile_dispatches_ = profile_barriers_ = 0;
  }
  if (profile_ && !replay_ms_.empty()) print_replay_times();
}

void Stream::begin_capture() {
  submit();
  capture_cmd_ = ctx_.device.allocateCommandBuffers(
      {.commandPool = pool_, .level = vk::CommandBufferLevel::ePrimary, .commandBufferCount = 1})[0];
  // Replays may be queued while an earlier one still runs; its first barrier orders them.
  capture_cmd_.begin(vk::CommandBufferBeginInfo{.flags = vk::CommandBufferUsageFlagBits::eSimultaneousUse});
  full_barrier(capture_cmd_);  // work submitted before a replay may write what it reads
  read_.clear();
  written_.clear();
  capturing_ = true;
}

vk::CommandBuffer Stream::end_capture() {
  // Work submitted after a replay may read what it wrote: eager batches start with a barrier.
  capture_cmd_.end();
  capturing_ = false;
  read_.clear();
  written_.clear();
  return std::exchange(capture_cmd_, vk::CommandBuffer{});
}

void Stream::abort_capture() {
  if (!capturing_) return;
  capture_cmd_.end();
  ctx_.device.freeCommandBuffers(pool_, capture_cmd_);
  capture_cmd_ = vk::CommandBuffer{};
  capturing_ = false;
  read_.clear();
  written_.clear();
}

std::uint64_t Stream::replay(vk::CommandBuffer captured) {
  const std::vector<vk::Semaphore> pending = wait_semaphores_;
  const std::vector<std::uint64_t> pending_values = wait_values_;
  submit();  // eager work recorded before the replay (new inputs) runs first
  for (std::size_t i = 0; i < pending.size(); ++i)  // the replay waits too, not only the batch before it
    wait_for(pending[i], pending_values[i]);
  throttle(true);
  completed_serial();
  Batch b;
  b.cmd = captured;
  b.captured = true;
  if (spare_fences_.empty()) {
    b.fence = ctx_.device.createFence({});
  } else {
    b.fence = spare_fences_.back();
    spare_fences_.pop_back();
  }
  b.serial = next_serial_;
  if (profile_) {
    b.timer = take_replay_timer();
    const ReplayTimer& t = replay_timers_[std::size_t(b.timer)];
    const vk::CommandBuffer cmds[] = {t.begin, b.cmd, t.end};
    queue_submit(cmds, b.fence, b.serial);
  } else {
    queue_submit({&b.cmd, 1}, b.fence, b.serial);
  }
  in_flight_.push_back(b);
  ++next_serial_;
  ++submits_;
  return b.serial;
}

void Stream::free_captured(vk::CommandBuffer captured, std::uint64_t last_serial) {
  if (last_serial > completed_serial()) wait_all();
  ctx_.device.freeCommandBuffers(pool_, captured);
}

void Stream::collect_profile(Batch& b) {
  const std::uint32_t n = std::uint32_t(b.labels.size());
  std::vector<std::uint64_t> ticks(n);
  auto r = ctx_.device.getQueryPoolResults(b.queries, 0, n, n * sizeof(std::uint64_t), ticks.data(),
                                           sizeof(std::uint64_t), vk::QueryResultFlagBits::e64);
  if (r != vk::Result::eSuccess) return;
  const double ms_per_tick = ctx_.properties.limits.timestampPeriod * 1e-6;
  for (std::uint32_t i = 1; i < n; ++i) {
    auto& t = profile_totals_[b.labels[i]];
    t.first += double(ticks[i] - ticks[i - 1]) * ms_per_tick;
    ++t.second;
  }
}

int Stream::take_replay_timer() {
  if (!spare_replay_timers_.empty()) {
    const int t = spare_replay_timers_.back();
    spare_replay_timers_.pop_back();
    return t;
  }
  ReplayTimer t;
  const auto cmds = ctx_.device.allocateCommandBuffers(
      {.commandPool = pool_, .level = vk::CommandBufferLevel::ePrimary, .commandBufferCount = 2});
  t.begin = cmds[0];
  t.end = cmds[1];
  t.queries = ctx_.device.createQueryPool({.queryType = vk::QueryType::eTimestamp, .queryCount = 2});
  // Bottom of the pipe: once everything submitted before has finished, so
  // the first stamp marks the replay's start, or the GPU's wait for it.
  t.begin.begin(vk::CommandBufferBeginInfo{});
  t.begin.resetQueryPool(t.queries, 0, 2);
  t.begin.writeTimestamp(vk::PipelineStageFlagBits::eBottomOfPipe, t.queries, 0);
  t.begin.end();
  t.end.begin(vk::CommandBufferBeginInfo{});
  t.end.writeTimestamp(vk::PipelineStageFlagBits::eBottomOfPipe, t.queries, 1);
  t.end.end();
  replay_timers_.push_back(t);
  return int(replay_timers_.size() - 1);
}

void Stream::collect_replay_time(const Batch& b) {
  spare_replay_timers_.push_back(b.timer);
  std::uint64_t ticks[2];
  auto r = ctx_.device.getQueryPoolResults(replay_timers_[std::size_t(b.timer)].queries, 0, 2, sizeof ticks, ticks,
                                           sizeof(std::uint64_t), vk::QueryResultFlagBits::e64);
  if (r != vk::Result::eSuccess) return;
  const double ms_per_tick = ctx_.properties.limits.timestampPeriod * 1e-6;
  const double gpu = double((ticks[1] - ticks[0]) & tick_mask_) * ms_per_tick;  // across a wrap too
  replay_ms_.push_back(gpu);
  ++replay_times_.count;
  replay_times_.gpu_ms += gpu;
  if (have_replay_end_) {
    const double gap = double((ticks[0] - last_replay_end_) & tick_mask_) * ms_per_tick;
    replay_gap_ms_.push_back(gap);
    ++replay_times_.gaps;
    replay_times_.gap_ms += gap;
  }
  last_replay_end_ = ticks[1];
  have_replay_end_ = true;
}

void Stream::print_replay_times() {
  auto median = [](std::vector<double>& v) {
    std::nth_element(v.begin(), v.begin() + std::ptrdiff_t(v.size() / 2), v.end());
    return v[v.size() / 2];
  };
  const auto [lo, hi] = std::minmax_element(replay_ms_.begin(), replay_ms_.end());
  const double min_ms = *lo, max_ms = *hi;
  std::fprintf(stderr, "vulkan replays (%s): %zu timed, %.3f ms of GPU time a replay (median; %.3f to %.3f)",
               ctx_.name.c_str(), replay_ms_.size(), median(replay_ms_), min_ms, max_ms);
  if (!replay_gap_ms_.empty()) {
    const double most = *std::max_element(replay_gap_ms_.begin(), replay_gap_ms_.end());
    std::fprintf(stderr, ", %.3f ms from one's end to the next one's start (median; %.3f at most)",
                 median(replay_gap_ms_), most);
  }
  std::fprintf(stderr, "\n");
  replay_ms_.clear();
  replay_gap_ms_.clear();
}

}  // namespace rumus::vulkan
