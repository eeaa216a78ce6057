#pragma once
// The Vulkan implementation of Backend for one physical device: memory,
// transfers, the recording stream, capture, and launch(). The kernels are free
// functions in their family files (vulkan/<family>.cpp), registered there
// like the CPU's, that reach the device through device_of(be).
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "allocator.hpp"
#include "context.hpp"
#include "gemm_tuner.hpp"
#include "pipelines.hpp"
#include "shader_ids.hpp"
#include "../../core/device_registry.hpp"
#include "../attention.hpp"
#include "../backend.hpp"
#include "../conv.hpp"
#include "../gather.hpp"
#include "../gemm.hpp"
#include "../layer_norm.hpp"
#include "../optimizer_step.hpp"
#include "../pointwise.hpp"
#include "../pool.hpp"
#include "../random.hpp"
#include "../reduce.hpp"
#include "../softmax.hpp"
#include "../strided.hpp"
#include "stream.hpp"
#include "transfer.hpp"

namespace rumus::vulkan {

class VulkanBackend final : public Backend {
 public:
  explicit VulkanBackend(int index);
  ~VulkanBackend() override;

  Device device() const override { return Device::vulkan(index_); }

  void* allocate(std::size_t nbytes) override;
  void deallocate(void* data, std::size_t nbytes) override;
  void write(Storage& dst, std::size_t byte_offset, const void* src, std::size_t nbytes) override;
  void read(const Storage& src, std::size_t byte_offset, void* dst, std::size_t nbytes) override;
  void synchronize() override;

  DeviceStats stats() const override;

  // The f32 GEMM's tile tuner (off unless RUMUS_VULKAN_GEMM_TUNE=1).
  GemmTuner& gemm_tuner() { return *tuner_; }
  // Puts another tuner in its place (tests: a cache file of their own); returns the old one.
  std::unique_ptr<GemmTuner> replace_gemm_tuner(std::unique_ptr<GemmTuner> t) {
    std::swap(t, tuner_);
    return t;
  }
  bool can_capture() const override { return true; }
  void begin_capture() override;
  std::unique_ptr<CapturedWork> end_capture() override;
  void abort_capture() override;

 // What kernel family files (vulkan/<family>.cpp, src/backend/kernel_registry.hpp) build on.
  struct Operand {
    TensorArg arg;
    bool written;
  };
  // Records one kernel: pipeline from (shader, spec), operands bound in order.
  void launch(ShaderId shader, const std::vector<std::uint32_t>& spec, std::span<const Operand> operands,
              const void* push, std::uint32_t push_bytes, std::uint32_t gx, std::uint32_t gy = 1,
              std::uint32_t gz = 1);
  // The device's features (float atomics, f64, subgroups).
  const Context& context() const { return *ctx_; }
  // Gather kernels' fault codes (binding 3 of their shaders).
  enum class IndexKernel : std::uint32_t { index_select = 1, index_add = 2, gather = 3, scatter_add = 4, nll_loss = 5 };
  // Counters for one split-K GEMM of up to `tiles` output tiles (gemm.comp's
  // SLICES_MEET), all 0: each launch leaves them at 0 again. A few buffers
  // taken in turn, so consecutive products need no barrier between them.
  TensorArg split_k_counters(std::int64_t tiles);
  static constexpr std::int64_t kSplitKCounters = 1024;
  // The fault record as a kernel operand; marks that a check is due at the next wait.
  TensorArg index_fault_operand();
  // Whether a capture is recording: the GEMM tuner cannot time tiles then.
  bool capturing() const { return capturing_; }
  // A timestamp after the work recorded so far, and a wait for the queue alone
  // (no capture or index-fault checks): the GEMM tuner's timing runs.
  void timestamp(vk::QueryPool pool, std::uint32_t query);
  void wait_queue();

 protected:
  // Staging (transfer.hpp): mapped host buffers from the staging pool, copies
  // on the transfer queue ordered by the two timelines.
  std::unique_ptr<HostBuffer> make_host_buffer(std::size_t nbytes) override;
  void queue_copy_to_host(const Storage& src, std::size_t src_offset, HostBuffer& dst, std::size_t dst_offset,
                          std::size_t nbytes) override;
  void queue_copy_from_host(HostBuffer& src, std::size_t src_offset, Storage& dst, std::size_t dst_offset,
                            std::size_t nbytes) override;

 private:
  friend class VulkanCapturedWork;
  friend class VulkanHostBuffer;
  friend class VulkanInterop;  // memory and semaphores shared with CUDA (interop.cpp)
  // With mu_ held: the batch being recorded uses `a` (writes it if
  // `written`): it first waits for the staging copies it must follow.
  void touch(Allocation& a, bool written);
  void after_staging_copies(const Allocation& a, bool written);
  // With mu_ held: the compute serial a staging copy waits for so that it
  // follows the batch `serial` (0: nothing to wait for). That batch is
  // submitted first if it is still recording.
  std::uint64_t staging_after(std::uint64_t serial);
  // With mu_ held: returns `a` to `pool`, or keeps it until the staging
  // copies that use it have finished.
  void release_to(Allocator& pool, Allocation* a);
  void release_finished();
  // With mu_ held: throws CaptureError when `op` cannot run now because a
  // capture is recording on this device (host transfers; other threads).
  void check_capture(const char* op, const char* what);
  // With mu_ held: releases `a` unless a capture pins it.
  void release(Allocation* a);
  void unpin(const std::vector<Allocation*>& used);

  // The record a gather kernel leaves when it meets an index outside [0, n)
  // (binding 3 of index_select.comp and index_add.comp, and their
  // per-element variants gather and scatter_add).
  struct IndexFault {
    std::uint32_t seen;    // nonzero once a kernel met a bad index
    std::int32_t index;    // the first one recorded
    std::uint32_t n;       // the size of the dim it indexed
    std::uint32_t kernel;  // an IndexKernel
  };
  static inline const Layout kIndexFaultLayout = Layout::contiguous({4});
  // With mu_ held: queue a read of the record if a gather ran since the last
  // wait, and raise its error once the wait is over.
  Allocation* queue_index_fault_read();
  void raise_index_fault(Allocation* stage);

  int index_;
  std::unique_ptr<Context> ctx_;
  std::unique_ptr<Allocator> memory_, staging_;
  std::unique_ptr<Pipelines> pipelines_;
  std::unique_ptr<Stream> stream_;
  // Staging copies to the host and to the device, each on its own queue.
  std::unique_ptr<TransferQueue> to_host_, to_device_;
  // With mu_ held: the staging copies' values are all known to be done.
  bool staging_done(const Allocation& a) const;
  // Waits for every staging copy submitted so far.
  void wait_staging();
  // Released while a staging copy still used them: (pool, range).
  std::vector<std::pair<Allocator*, Allocation*>> staged_releases_;
  std::unique_ptr<GemmTuner> tuner_;
  mutable std::mutex mu_;  // one recording stream per device; callers may be on any thread
  std::uint64_t uploads_ = 0, downloads_ = 0;
  bool profiling_ = false;  // RUMUS_VULKAN_PROFILE: label dispatches for the stream's timestamps
  std::shared_ptr<Storage> index_fault_;
  std::shared_ptr<Storage> split_k_counters_[4];
  unsigned next_split_k_counters_ = 0;
  static inline const Layout kSplitKCountersLayout = Layout::contiguous({kSplitKCounters});
  bool index_kernels_pending_ = false;
  // Capture: the recording thread; allocations the capture binds or creates
  // (recording_used_), and how many live captures pin each allocation. A
  // pinned allocation freed by its tensor waits in orphans_ until unpinned.
  bool capturing_ = false;
  std::thread::id capture_thread_;
  std::unordered_set<Allocation*> recording_used_;
  bool recording_gathers_ = false;
  std::unordered_map<Allocation*, int> pins_;
  std::unordered_set<Allocation*> orphans_;
};

// The device a registered kernel runs on: the registry calls Vulkan kernels
// with this backend only.
inline VulkanBackend& device_of(Backend& be) { return static_cast<VulkanBackend&>(be); }

// The build to run for arithmetic on `dtype`: for f64, and for i64, which float
// would round above 2^24, the shader's f64 build (its manifest line's f64 flag).
ShaderId shader_for(ShaderId shader, DType dtype);

// Conditions a registration adds to its dtypes: f64 only where the device
// computes in double.
bool runs_f64(Backend& be, DType dtype);

// The Vulkan provider: the instance's physical devices in rumus order.
detail::DeviceProvider provider();

// Workgroup count for a grid-stride loop over n elements.
std::uint32_t groups_for(std::int64_t n, std::uint32_t local);

}  // namespace rumus::vulkan
