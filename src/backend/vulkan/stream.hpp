#pragma once
// The command stream of one device: kernels and copies record into the
// current command buffer; it is submitted at a host read, synchronize(), once
// kBatchLimit commands are queued, or, checked every kIdleCheck commands, as
// soon as the device has finished everything submitted before (so it works
// while the host records the rest). Each submission gets a serial; its fence
// tells when buffers it used may be reused, and it signals the serial on a
// timeline semaphore, which staging copies on the transfer queue wait for.
#include <cstdint>
#include <deque>
#include <map>
#include <span>
#include <string>
#include <unordered_set>
#include <vector>

#include "allocator.hpp"
#include "context.hpp"

namespace rumus::vulkan {

struct Binding {
  const Allocation* allocation;
  bool written;
};

class Stream {
 public:
  static constexpr std::uint32_t kBatchLimit = 1024;
  static constexpr std::size_t kMaxInFlight = 3;
  // Replays of a captured step queue deeper: they free no memory, and a host
  // that wakes late from a fence wait should not leave the GPU idle between
  // short steps. Measured on an H100: the MNIST MLP captured 1.00-1.01x at
  // batch 64 and 512, the CNN and ResNet-18 level.
  static constexpr std::size_t kMaxReplaysInFlight = 8;
  // Measured on an H200 (char_lm, --amp, which reads a flag every step):
  // checking every 16 commands gave 1.12-1.29x the tokens/s of submitting
  // only at reads and full batches, every 64 commands 1.11-1.25x.
  static constexpr std::uint32_t kIdleCheck = 16;

  explicit Stream(Context& ctx);
  ~Stream();

  void dispatch(vk::Pipeline pipeline, vk::PipelineLayout layout, std::span<const Binding> bindings,
                const void* push, std::uint32_t push_bytes, std::uint32_t gx, std::uint32_t gy = 1,
                std::uint32_t gz = 1, const std::string* label = nullptr);
  void copy(const Allocation& src, std::size_t src_offset, const Allocation& dst, std::size_t dst_offset,
            std::size_t nbytes);

  // Records a timestamp into `pool` at `query` once everything recorded before it has finished.
  void timestamp(vk::QueryPool pool, std::uint32_t query);

  // Serial of the batch being recorded (the one a release now must wait for).
  std::uint64_t recording_serial() const { return next_serial_; }
  std::uint64_t completed_serial();
  void submit();          // no-op when nothing is recorded
  void wait_all();        // submit, then wait for everything
  // Signalled with each submission's serial once it (and all before it) has finished.
  vk::Semaphore timeline() const { return timeline_; }
  // The next submission (the batch being recorded, or a replay) first waits
  // until `semaphore` (another queue's timeline, or one another API signals)
  // reaches `value`.
  void wait_for(vk::Semaphore semaphore, std::uint64_t value);
  std::uint64_t submits() const { return submits_; }
  std::uint64_t drains() const { return drains_; }  // wait_all calls
  std::uint64_t commands() const { return commands_total_; }  // kernels and copies recorded outside captures
  // RUMUS_VULKAN_PROFILE=1 also times every replay on the GPU, from the end
  // of the work before it to the end of its own, and the time from one
  // replay's end to the next one's start: eager work between them (new
  // inputs) and the GPU's waits for a host that submits late. Totals since
  // the stream began; each wait prints the medians since the last.
  struct ReplayTimes {
    std::uint64_t count = 0;  // replays timed
    double gpu_ms = 0;        // their GPU time in all
    std::uint64_t gaps = 0;   // replays after an earlier one
    double gap_ms = 0;        // from the earlier one's end to their start, in all
  };
  const ReplayTimes& replay_times() const { return replay_times_; }

  // Capture: submits what is recorded, then records into a persistent command
  // buffer that is never submitted by the stream itself.
  void begin_capture();
  vk::CommandBuffer end_capture();  // the recorded buffer; eager recording resumes
  void abort_capture();
  bool capturing() const { return capturing_; }
  // Submits the recorded eager work, then `captured`; returns its serial.
  std::uint64_t replay(vk::CommandBuffer captured);
  // Frees a captured buffer once its last replay (serial) has finished.
  void free_captured(vk::CommandBuffer captured, std::uint64_t last_serial);

 private:
  struct Batch {
    vk::CommandBuffer cmd;
    vk::Fence fence;
    std::uint64_t serial;
    vk::QueryPool queries;            // profiling only
    std::vector<std::string> labels;  // one per timestamp
    bool captured = false;            // a capture's buffer: its owner frees it
    int timer = -1;                   // a replay's ReplayTimer (profiling only)
  };
  // Two one-command buffers submitted around a replay, each writing a timestamp.
  struct ReplayTimer {
    vk::CommandBuffer begin, end;
    vk::QueryPool queries;
  };
  int take_replay_timer();
  void collect_replay_time(const Batch& b);
  void print_replay_times();
  // RUMUS_VULKAN_PROFILE=1: a timestamp after every dispatch; the gaps between
  // consecutive ones are summed per label and printed to stderr at each wait.
  void collect_profile(Batch& b);
  // Waits while kMaxInFlight eager batches (or, for a replay, kMaxReplaysInFlight replays) are pending.
  void throttle(bool replay);
  // Submits `cmds` with `fence`, signalling `serial` and taking the pending wait.
  void queue_submit(std::span<const vk::CommandBuffer> cmds, vk::Fence fence, std::uint64_t serial);
  void after_command();  // submits a full batch, or any batch once the device is idle
  vk::CommandBuffer current();
  // Inserts a barrier when this access conflicts with one since the last barrier.
  void order(std::span<const Binding> access);
  static std::uint64_t key(const Allocation& a) { return (std::uint64_t(a.block) << 44) | a.offset; }

  Context& ctx_;
  vk::CommandPool pool_;
  std::vector<Batch> idle_;
  std::deque<Batch> in_flight_;
  Batch recording_{};
  bool active_ = false;
  bool capturing_ = false;
  vk::CommandBuffer capture_cmd_;
  std::vector<vk::Fence> spare_fences_;  // of finished replays
  std::uint32_t commands_ = 0;
  std::uint64_t next_serial_ = 1, completed_ = 0, submits_ = 0, commands_total_ = 0, drains_ = 0;
  vk::Semaphore timeline_;
  // The waits of the next submission: the largest value per semaphore.
  std::vector<vk::Semaphore> wait_semaphores_;
  std::vector<std::uint64_t> wait_values_;
  std::unordered_set<std::uint64_t> read_, written_;
  bool profile_ = false;
  std::map<std::string, std::pair<double, std::uint64_t>> profile_totals_;  // label -> (ms, count)
  std::uint64_t profile_dispatches_ = 0, profile_barriers_ = 0;  // since the last profile printed
  std::vector<ReplayTimer> replay_timers_;
  std::vector<int> spare_replay_timers_;
  ReplayTimes replay_times_;
  std::vector<double> replay_ms_, replay_gap_ms_;  // since the last print
  std::uint64_t last_replay_end_ = 0;               // ticks
  bool have_replay_end_ = false;
  std::uint64_t tick_mask_ = 0;                     // the timestamps' valid bits
};

}  // namespace rumus::vulkan
