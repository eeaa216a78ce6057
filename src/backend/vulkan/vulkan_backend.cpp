// Vulkan backend: device memory, host transfers through staging, and the
// glue every kernel uses to record a dispatch.
//
// Two ways between device and host. read() and write() go through pooled
// staging blocks on the compute stream (a read waits for the whole queue).
// The staging calls (copy_to_host, copy_from_host) use persistent mapped
// host buffers and two transfer queues, one per direction: each copy waits
// on the device for the batch it depends on, found from the serials every
// range remembers (Allocation::used_serial, written_serial), and for the
// other direction's last copy on the same memory; compute batches that
// touch a range after a staging copy wait for that copy (last_download,
// last_upload). The host waits for one copy, never for a queue.
#include "vulkan_backend.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include <fmt/format.h>

#include "../../core/env.hpp"
#include "rumus/core/capture.hpp"
#include "rumus/core/error.hpp"
#include "rumus/core/profiler.hpp"
#include "kernels.hpp"

namespace rumus::vulkan {

namespace {
// The instance's devices, or none when no loader or driver is present.
const std::vector<vk::PhysicalDevice>* physical_devices() {
  try {
    return &instance().devices;
  } catch (const Error&) {
    return nullptr;
  }
}
}  // namespace

detail::DeviceProvider provider() {
  return {.kind = Device::Kind::vulkan,
          .count = [] {
            auto* devices = physical_devices();
            return devices ? int(devices->size()) : 0;
          },
          .name = [](int index) { return std::string(physical_devices()->at(index).getProperties().deviceName.data()); },
          // Software rasterisers (lavapipe) are slower than the CPU backend.
          .accelerator = [](int index) {
            return physical_devices()->at(index).getProperties().deviceType != vk::PhysicalDeviceType::eCpu;
          },
          .make = [](int index) -> std::unique_ptr<DeviceBackend> { return std::make_unique<VulkanBackend>(index); }};
}

bool runs_f64(Backend& be, DType dtype) {
  return dtype != DType::f64 || device_of(be).context().float64;
}

ShaderId shader_for(ShaderId shader, DType dtype) {
  if (dtype != DType::f64 && dtype != DType::i64) return shader;
  if (auto f64 = kShaderF64[std::size_t(shader)]) return *f64;
  throw DeviceError(
      fmt::format("vulkan: {} has no f64 build (no f64 flag in shaders/manifest.txt)", shader_name(shader)));
}

namespace {
const char* index_kernel_name(std::uint32_t code) {
  switch (VulkanBackend::IndexKernel(code)) {
    case VulkanBackend::IndexKernel::index_select: return "index_select";
    case VulkanBackend::IndexKernel::index_add: return "index_add";
    case VulkanBackend::IndexKernel::gather: return "gather";
    case VulkanBackend::IndexKernel::scatter_add: return "scatter_add";
    case VulkanBackend::IndexKernel::nll_loss: return "nll_loss";  // cross_entropy's target too
  }
  return "an indexing op";
}

constexpr std::size_t kDeviceBlock = std::size_t(64) << 20;
constexpr std::size_t kStagingBlock = std::size_t(16) << 20;
}  // namespace

namespace {
// The tuner's cache file is per device; its header names the driver too, so
// an updated driver measures afresh.
std::unique_ptr<GemmTuner> make_gemm_tuner(const Context& ctx) {
  const auto& p = ctx.properties;
  std::string uuid;
  for (std::uint8_t b : p.pipelineCacheUUID) uuid += fmt::format("{:02x}", b);
  std::string id = fmt::format("{:04x}:{:04x}:{}:{}:{}", p.vendorID, p.deviceID, p.driverVersion, uuid, ctx.name);
  std::filesystem::path dir = cache_directory(), file;
  if (!dir.empty()) file = dir / "vulkan" / fmt::format("gemm_tiles_{:04x}_{:04x}.txt", p.vendorID, p.deviceID);
  // Opt-in: tuning stalls the stream at the first product of each shape class
  // and measured gains were small (docs/benchmarks.md, gemm_vulkan_f32; bench/RESULTS.md at 3fd7f2c).
  const bool enabled = env::on("RUMUS_VULKAN_GEMM_TUNE");
  auto tuner = std::make_unique<GemmTuner>(id, file, enabled);
  if (std::string why = tuner->problem(); !why.empty()) std::fprintf(stderr, "rumus: vulkan: %s\n", why.c_str());
  return tuner;
}
}  // namespace

namespace {
// RUMUS_VULKAN_MEMORY_LIMIT_MIB: the most device memory this process holds
// on each device (as torch.cuda.set_per_process_memory_fraction), for sharing a GPU.
std::size_t memory_limit() {
  const auto mib = env::integer("RUMUS_VULKAN_MEMORY_LIMIT_MIB");
  if (!mib) return 0;
  if (*mib <= 0)
    throw ValueError(fmt::format("RUMUS_VULKAN_MEMORY_LIMIT_MIB: expected a positive number of MiB, got {}", *mib));
  return std::size_t(*mib) << 20;
}
}  // namespace

std::uint32_t groups_for(std::int64_t n, std::uint32_t local) {
  std::int64_t g = (n + local - 1) / local;
  return std::uint32_t(std::clamp<std::int64_t>(g, 1, 65535));
}

VulkanBackend::VulkanBackend(int index) : index_(index) {
  profiling_ = env::on("RUMUS_VULKAN_PROFILE");
  try {
    ctx_ = std::make_unique<Context>(index);
    // Out of memory, an allocator first waits for the work in flight (not
    // while a capture records: nothing recorded runs before replay()).
    auto reclaim = [this] {
      if (stream_->capturing()) return;
      stream_->wait_all();
      wait_staging();
      release_finished();
    };
    memory_ = std::make_unique<Allocator>(*ctx_, false, kDeviceBlock, memory_limit(), reclaim);
    staging_ = std::make_unique<Allocator>(*ctx_, true, kStagingBlock, 0, reclaim);
    pipelines_ = std::make_unique<Pipelines>(*ctx_, pipeline_cache_file(ctx_->properties));
    if (std::string why = pipelines_->cache().problem(); !why.empty()) std::fprintf(stderr, "rumus: vulkan: %s\n", why.c_str());
    stream_ = std::make_unique<Stream>(*ctx_);
    to_host_ = std::make_unique<TransferQueue>(*ctx_, ctx_->transfer_queue);
    to_device_ = std::make_unique<TransferQueue>(*ctx_, ctx_->upload_queue);
    tuner_ = make_gemm_tuner(*ctx_);
  } catch (const vk::SystemError& e) {
    throw DeviceError("vulkan:" + std::to_string(index) + ": device setup failed: " + e.what());
  }
}

VulkanBackend::~VulkanBackend() {
  index_fault_.reset();
  tuner_.reset();
  to_device_.reset();  // each waits for its copies, which wait only for submitted work
  to_host_.reset();
  stream_.reset();
  pipelines_.reset();
  staging_.reset();
  memory_.reset();
}

void VulkanBackend::release_finished() {
  if (!staged_releases_.empty()) {
    to_host_->poll();
    to_device_->poll();
    std::erase_if(staged_releases_, [&](const std::pair<Allocator*, Allocation*>& r) {
      if (!staging_done(*r.second)) return false;
      r.first->release(r.second, stream_->recording_serial());
      return true;
    });
  }
  std::uint64_t done = stream_->completed_serial();
  memory_->collect(done);
  staging_->collect(done);
}

bool VulkanBackend::staging_done(const Allocation& a) const {
  return a.last_download <= to_host_->known_completed() && a.last_upload <= to_device_->known_completed();
}

void VulkanBackend::wait_staging() {
  to_host_->wait(to_host_->submitted());
  to_device_->wait(to_device_->submitted());
}

void VulkanBackend::release_to(Allocator& pool, Allocation* a) {
  if (!staging_done(*a)) {
    staged_releases_.push_back({&pool, a});  // counted as in use until then
    return;
  }
  pool.release(a, stream_->recording_serial());
}

void* VulkanBackend::allocate(std::size_t nbytes) {
  std::lock_guard lk(mu_);
  release_finished();
  Allocation* a = memory_->allocate(nbytes);
  // Memory a capture creates stays its own: replays write it again.
  if (capturing_ && std::this_thread::get_id() == capture_thread_) recording_used_.insert(a);
  return a;
}

void VulkanBackend::deallocate(void* data, std::size_t) {
  std::lock_guard lk(mu_);
  release(static_cast<Allocation*>(data));
}

void VulkanBackend::release(Allocation* a) {
  if (pins_.count(a) || (capturing_ && recording_used_.count(a))) {
    orphans_.insert(a);  // a live capture still reads or writes it
    return;
  }
  release_to(*memory_, a);
}

void VulkanBackend::check_capture(const char* op, const char* what) {
  if (!capturing_) return;
  if (std::this_thread::get_id() != capture_thread_)
    throw CaptureError(fmt::format("{}: {} on {} from another thread while a capture records on it (wait until "
                                   "capture() returns)",
                                   op, what, device().str()));
  check_not_capturing(op, what);
}

// Capture: kernels go into a persistent command buffer (Stream::begin_capture);
// every allocation the capture binds or creates is pinned until the
// CapturedWork is destroyed, so replays never touch reused memory.
class VulkanCapturedWork final : public CapturedWork {
 public:
  VulkanCapturedWork(VulkanBackend& be, vk::CommandBuffer cmd, std::vector<Allocation*> used, bool gathers)
      : be_(be), cmd_(cmd), used_(std::move(used)), gathers_(gathers) {}
  ~VulkanCapturedWork() override {
    std::lock_guard lk(be_.mu_);
    try {
      be_.stream_->free_captured(cmd_, last_serial_);
    } catch (...) {
    }
    be_.unpin(used_);
  }
  void check_replay() const override {
    std::lock_guard lk(be_.mu_);
    be_.check_capture("CapturedStep::replay", "a replay");
  }
  void replay() override {
    std::lock_guard lk(be_.mu_);
    be_.check_capture("CapturedStep::replay", "a replay");
    // Which of its ranges the work writes is not kept: order it as a writer of all.
    for (Allocation* a : used_) be_.after_staging_copies(*a, true);
    last_serial_ = be_.stream_->replay(cmd_);
    for (Allocation* a : used_) a->used_serial = a->written_serial = last_serial_;
    if (gathers_) be_.index_kernels_pending_ = true;  // check the fault record at the next wait
  }

 private:
  VulkanBackend& be_;
  vk::CommandBuffer cmd_;
  std::vector<Allocation*> used_;
  bool gathers_;
  std::uint64_t last_serial_ = 0;
};

void VulkanBackend::begin_capture() {
  std::lock_guard lk(mu_);
  if (capturing_)
    throw CaptureError(fmt::format("capture: {} is already recording a capture on another thread", device().str()));
  stream_->begin_capture();
  capturing_ = true;
  capture_thread_ = std::this_thread::get_id();
  recording_used_.clear();
  recording_gathers_ = false;
}

std::unique_ptr<CapturedWork> VulkanBackend::end_capture() {
  std::lock_guard lk(mu_);
  vk::CommandBuffer cmd = stream_->end_capture();
  capturing_ = false;
  std::vector<Allocation*> used(recording_used_.begin(), recording_used_.end());
  recording_used_.clear();
  for (Allocation* a : used) ++pins_[a];
  return std::make_unique<VulkanCapturedWork>(*this, cmd, std::move(used), recording_gathers_);
}

void VulkanBackend::abort_capture() {
  std::lock_guard lk(mu_);
  stream_->abort_capture();  // nothing of it was submitted
  capturing_ = false;
  // Tensors the closure freed wait in orphans_: release those no other capture pins.
  for (Allocation* a : recording_used_)
    if (!pins_.count(a) && orphans_.erase(a)) release_to(*memory_, a);
  recording_used_.clear();
}

void VulkanBackend::unpin(const std::vector<Allocation*>& used) {
  for (Allocation* a : used) {
    auto it = pins_.find(a);
    if (it != pins_.end() && --it->second > 0) continue;
    if (it != pins_.end()) pins_.erase(it);
    // Freed by its tensor meanwhile: reusable once the work queued so far is done.
    if (orphans_.erase(a)) release_to(*memory_, a);
  }
}

void VulkanBackend::write(Storage& dst, std::size_t off, const void* src, std::size_t n) {
  if (n == 0) return;
  std::lock_guard lk(mu_);
  check_capture("upload", fmt::format("a host-to-device copy of {} bytes (it would replay the same bytes: copy "
                                      "new inputs into static tensors before replay())", n).c_str());
  // Staged and recorded in order with the kernels: no submission needed here.
  Allocation* stage = staging_->allocate(n);
  std::memcpy(stage->mapped, src, n);
  touch(*static_cast<Allocation*>(dst.data()), true);
  stream_->copy(*stage, 0, *static_cast<Allocation*>(dst.data()), off, n);
  staging_->release(stage, stream_->recording_serial());
  ++uploads_;
}

void VulkanBackend::read(const Storage& src, std::size_t off, void* dst, std::size_t n) {
  if (n == 0) return;
  std::lock_guard lk(mu_);
  check_capture("host read", fmt::format("a device-to-host copy of {} bytes (item(), to(cpu), to_vector(): the "
                                         "values exist only after replay())", n).c_str());
  Allocation* stage = staging_->allocate(n);
  touch(*static_cast<Allocation*>(src.data()), false);
  stream_->copy(*static_cast<Allocation*>(src.data()), off, *stage, 0, n);
  staging_->release(stage, stream_->recording_serial());
  Allocation* fault = queue_index_fault_read();
  stream_->wait_all();
  std::memcpy(dst, stage->mapped, n);  // still ours: released ranges are reused only by later allocations
  release_finished();
  ++downloads_;
  raise_index_fault(fault);
}

void VulkanBackend::synchronize() {
  std::lock_guard lk(mu_);
  check_capture("synchronize", "a wait for the device (nothing recorded runs before replay())");
  Allocation* fault = queue_index_fault_read();
  stream_->wait_all();
  wait_staging();  // staging copies are queued work too
  release_finished();
  raise_index_fault(fault);
}

// Staging through host buffers (transfer.hpp).

void VulkanBackend::after_staging_copies(const Allocation& a, bool written) {
  // A read follows the uploads that wrote the range; a write the downloads that read it too.
  if (a.last_upload > to_device_->known_completed()) stream_->wait_for(to_device_->timeline(), a.last_upload);
  if (written && a.last_download > to_host_->known_completed())
    stream_->wait_for(to_host_->timeline(), a.last_download);
}

void VulkanBackend::touch(Allocation& a, bool written) {
  after_staging_copies(a, written);
  if (capturing_) return;  // captured work runs at replay(), which notes its serial then
  a.used_serial = stream_->recording_serial();
  if (written) a.written_serial = a.used_serial;
}

std::uint64_t VulkanBackend::staging_after(std::uint64_t serial) {
  if (serial >= stream_->recording_serial()) {
    // Still recording: submit it, since a copy may wait only for submitted work
    // (a wait for a later submission would deadlock a queue shared with the copies).
    stream_->submit();
    if (serial >= stream_->recording_serial()) return 0;  // nothing was recorded under it
  }
  return serial > stream_->completed_serial() ? serial : 0;
}

// A range of the staging pool kept for one owner; mapped, host-coherent and,
// where the device offers it, host-cached (reads at memory speed).
class VulkanHostBuffer final : public HostBuffer {
 public:
  VulkanHostBuffer(VulkanBackend& be, Allocation* a) : HostBuffer(be.device(), a->mapped, a->size), be_(be), allocation_(a) {}
  ~VulkanHostBuffer() override {
    std::lock_guard lk(be_.mu_);
    be_.release_to(*be_.staging_, allocation_);
  }
  void wait() override {
    std::uint64_t download, upload;
    {
      std::lock_guard lk(be_.mu_);
      download = allocation_->last_download;
      upload = allocation_->last_upload;
    }
    // Not under the lock: other threads keep recording meanwhile.
    be_.to_host_->wait(download);
    be_.to_device_->wait(upload);
  }
  Allocation& allocation() { return *allocation_; }

 private:
  VulkanBackend& be_;
  Allocation* allocation_;
};

std::unique_ptr<HostBuffer> VulkanBackend::make_host_buffer(std::size_t nbytes) {
  std::lock_guard lk(mu_);
  release_finished();
  Allocation* a = staging_->allocate(std::max<std::size_t>(nbytes, 1));
  return std::make_unique<VulkanHostBuffer>(*this, a);
}

void VulkanBackend::queue_copy_to_host(const Storage& src, std::size_t src_offset, HostBuffer& dst,
                                       std::size_t dst_offset, std::size_t nbytes) {
  Allocation& host = static_cast<VulkanHostBuffer&>(dst).allocation();
  Allocation& a = *static_cast<Allocation*>(src.data());
  std::lock_guard lk(mu_);
  check_capture("copy_to_host", fmt::format("a device-to-host copy of {} bytes (the values exist only after "
                                            "replay())", nbytes).c_str());
  // After the kernels that wrote the source, the uploads that wrote its
  // bytes, and the uploads still reading the host buffer.
  const std::uint64_t uploads =
      last_overlapping(a.uploads, src_offset, src_offset + nbytes, to_device_->known_completed());
  const std::uint64_t copy =
      to_host_->copy(a, src_offset, host, dst_offset, nbytes, {stream_->timeline(), staging_after(a.written_serial)},
                     {to_device_->timeline(), std::max(uploads, host.last_upload)});
  a.downloads.push_back({src_offset, src_offset + nbytes, copy});
  a.last_download = copy;
  host.last_download = copy;
  ++downloads_;
}

void VulkanBackend::queue_copy_from_host(HostBuffer& src, std::size_t src_offset, Storage& dst,
                                         std::size_t dst_offset, std::size_t nbytes) {
  Allocation& host = static_cast<VulkanHostBuffer&>(src).allocation();
  Allocation& a = *static_cast<Allocation*>(dst.data());
  std::lock_guard lk(mu_);
  check_capture("copy_from_host", fmt::format("a host-to-device copy of {} bytes (it would replay the same bytes: "
                                              "copy new inputs into static tensors before replay())", nbytes).c_str());
  // After the kernels that use the destination, the downloads still reading
  // its bytes, and the downloads that wrote the host buffer.
  const std::uint64_t downloads =
      last_overlapping(a.downloads, dst_offset, dst_offset + nbytes, to_host_->known_completed());
  const std::uint64_t copy =
      to_device_->copy(host, src_offset, a, dst_offset, nbytes, {stream_->timeline(), staging_after(a.used_serial)},
                       {to_host_->timeline(), std::max(downloads, host.last_download)});
  a.uploads.push_back({dst_offset, dst_offset + nbytes, copy});
  a.last_upload = copy;
  host.last_upload = copy;
  ++uploads_;
}

TensorArg VulkanBackend::split_k_counters(std::int64_t tiles) {
  if (tiles > kSplitKCounters)
    throw Error(fmt::format("gemm: split K over {} output tiles, more than the {} counters", tiles, kSplitKCounters));
  std::unique_lock lk(mu_);
  std::shared_ptr<Storage>& counters = split_k_counters_[next_split_k_counters_++ % std::size(split_k_counters_)];
  if (!counters) {
    lk.unlock();  // allocating may wait for the device
    auto made = std::make_shared<Storage>(device(), std::size_t(kSplitKCounters) * 4);
    lk.lock();
    // Zeroed on the transfer queue and waited for: a capture may be recording
    // (its kernels run only at replay), and the counters serve both.
    if (!counters) {
      const Allocation& a = *static_cast<const Allocation*>(made->data());
      to_device_->wait(to_device_->fill(a, 0, std::size_t(kSplitKCounters) * 4, 0));
      counters = std::move(made);
    }
  }
  return {counters.get(), DType::i32, &kSplitKCountersLayout};
}

// Gather kernels cannot throw: one that meets an index outside [0, n) skips it
// and records it in index_fault_. The host looks at the record whenever it
// waits for the device anyway, and raises the error there (as CUDA reports
// device-side asserts), so a training step stays free of extra reads.
TensorArg VulkanBackend::index_fault_operand() {
  if (!index_fault_) {
    index_fault_ = std::make_shared<Storage>(device(), sizeof(IndexFault));
    fill(*this, {index_fault_.get(), DType::i32, &kIndexFaultLayout}, 0);
  }
  std::lock_guard lk(mu_);
  // Captured gathers run at replay: the record is checked after each replay.
  (capturing_ ? recording_gathers_ : index_kernels_pending_) = true;
  return {index_fault_.get(), DType::i32, &kIndexFaultLayout};
}

Allocation* VulkanBackend::queue_index_fault_read() {
  if (!index_kernels_pending_) return nullptr;
  index_kernels_pending_ = false;
  Allocation* stage = staging_->allocate(sizeof(IndexFault));
  stream_->copy(*static_cast<Allocation*>(index_fault_->data()), 0, *stage, 0, sizeof(IndexFault));
  staging_->release(stage, stream_->recording_serial());
  return stage;
}

void VulkanBackend::raise_index_fault(Allocation* stage) {
  if (!stage) return;
  IndexFault f;
  std::memcpy(&f, stage->mapped, sizeof f);
  if (f.seen == 0) return;
  // Clear the record for later kernels; the copy runs before anything recorded after it.
  Allocation* zeros = staging_->allocate(sizeof(IndexFault));
  std::memset(zeros->mapped, 0, sizeof(IndexFault));
  stream_->copy(*zeros, 0, *static_cast<Allocation*>(index_fault_->data()), 0, sizeof(IndexFault));
  staging_->release(zeros, stream_->recording_serial());
  throw ShapeError(fmt::format("{}: index {} is out of range for a dim of size {} (indices of an earlier op on {}, "
                               "found when the host waited for the device)",
                               index_kernel_name(f.kernel), f.index, f.n, device().str()));
}

void VulkanBackend::timestamp(vk::QueryPool pool, std::uint32_t query) {
  std::lock_guard lk(mu_);
  stream_->timestamp(pool, query);
}

void VulkanBackend::wait_queue() {
  std::lock_guard lk(mu_);
  stream_->wait_all();
}

DeviceStats VulkanBackend::stats() const {
  std::lock_guard lk(mu_);
  DeviceStats s;
  s.bytes_in_use = memory_->bytes_in_use();
  s.peak_bytes_in_use = memory_->peak_bytes_in_use();
  s.bytes_reserved = memory_->bytes_reserved();
  s.blocks = memory_->blocks();
  s.host_to_device = uploads_;
  s.device_to_host = downloads_;
  s.submits = stream_->submits();
  s.commands = stream_->commands();
  s.queue_drains = stream_->drains();
  const Stream::ReplayTimes& replays = stream_->replay_times();
  s.replays_timed = replays.count;
  s.replay_gpu_ms = replays.gpu_ms;
  s.replay_gaps = replays.gaps;
  s.replay_gap_ms = replays.gap_ms;
  return s;
}

void VulkanBackend::launch(ShaderId shader, const std::vector<std::uint32_t>& spec, std::span<const Operand> operands,
                           const void* push, std::uint32_t push_bytes, std::uint32_t gx, std::uint32_t gy,
                           std::uint32_t gz) {
  std::lock_guard lk(mu_);
  const std::string_view name = shader_name(shader);
  if (operands.size() > kMaxBindings)
    throw Error(std::string(name) + ": more operands than the pipeline layout's bindings");
  if (capturing_ && std::this_thread::get_id() != capture_thread_) check_capture(std::string(name).c_str(), "a kernel");
  Binding bindings[kMaxBindings];
  const std::uint32_t used = std::max<std::uint32_t>(kMinBindings, std::uint32_t(operands.size()));
  // Unused slots alias operand 0 so every binding the shader declares is valid.
  for (std::uint32_t i = 0; i < used; ++i) {
    const Operand& o = operands[i < operands.size() ? i : 0];
    bindings[i] = {static_cast<const Allocation*>(o.arg.storage->data()), i < operands.size() && o.written};
  }
  if (capturing_)
    for (std::uint32_t i = 0; i < used; ++i) recording_used_.insert(const_cast<Allocation*>(bindings[i].allocation));
  for (const Operand& o : operands) touch(*static_cast<Allocation*>(o.arg.storage->data()), o.written);
  vk::Pipeline p = pipelines_->get(shader, spec);
  if (profiling_) {
    // Under a rumus::Profiler, the op and pass that launched it come first.
    const std::string_view row = detail::profile_kernel_row();
    std::string label = (row.empty() ? std::string() : std::string(row) + " | ") + std::string(name) + "/" +
                        std::to_string(spec.size() > 1 ? spec[1] : 0) + " grid " + std::to_string(gx) + "x" +
                        std::to_string(gy) + "x" + std::to_string(gz);
    stream_->dispatch(p, pipelines_->layout(), std::span<const Binding>(bindings, used), push, push_bytes, gx, gy, gz, &label);
    return;
  }
  stream_->dispatch(p, pipelines_->layout(), std::span<const Binding>(bindings, used), push, push_bytes, gx, gy, gz);
}

}  // namespace rumus::vulkan
