// Vulkan backend: device memory, host transfers through staging, and the
// glue every kernel uses to record a dispatch.
#include "vulkan_backend.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include <fmt/format.h>

#include "rumus/core/error.hpp"

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

bool VulkanBackend::supports(Kernel kernel, DType dtype) const {
  switch (kernel) {
    case Kernel::fill: case Kernel::copy: case Kernel::random: case Kernel::index_select:
      return true;
    case Kernel::gemm:  // 16-bit operands accumulate in f32
      return dtype == DType::f32 || dtype == DType::f16 || dtype == DType::bf16;
    case Kernel::index_add:  // float atomics
      return dtype == DType::f32 && ctx_->float_atomics;
    case Kernel::sgd_step: case Kernel::adam_step: case Kernel::im2col: case Kernel::col2im:
    case Kernel::pool2d_forward: case Kernel::pool2d_backward: case Kernel::softmax_forward:
    case Kernel::softmax_backward:
      return is_floating(dtype) && dtype != DType::f64;
    case Kernel::unary: case Kernel::binary: case Kernel::where: case Kernel::reduce:
      return dtype != DType::f64;  // arithmetic runs in f32: f64 would lose precision silently
    case Kernel::conv2d_forward: case Kernel::conv2d_backward_data: case Kernel::conv2d_backward_weight:
      return dtype == DType::f32;  // implicit GEMM (conv_igemm.comp); other dtypes lower to im2col + GEMM
    case Kernel::attention_forward: case Kernel::attention_backward:
      return dtype == DType::f32;
  }
  return false;
}

namespace {
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
  const char* env = std::getenv("RUMUS_VULKAN_GEMM_TUNE");
  const bool enabled = env && *env ? *env != '0' : p.deviceType != vk::PhysicalDeviceType::eCpu;
  auto tuner = std::make_unique<GemmTuner>(id, file, enabled);
  if (std::string why = tuner->problem(); !why.empty()) std::fprintf(stderr, "rumus: vulkan: %s\n", why.c_str());
  return tuner;
}
}  // namespace

std::uint32_t groups_for(std::int64_t n, std::uint32_t local) {
  std::int64_t g = (n + local - 1) / local;
  return std::uint32_t(std::clamp<std::int64_t>(g, 1, 65535));
}

VulkanBackend::VulkanBackend(int index) : index_(index) {
  const char* p = std::getenv("RUMUS_VULKAN_PROFILE");
  profiling_ = p && *p && *p != '0';
  try {
    ctx_ = std::make_unique<Context>(index);
    memory_ = std::make_unique<Allocator>(*ctx_, false, kDeviceBlock);
    staging_ = std::make_unique<Allocator>(*ctx_, true, kStagingBlock);
    pipelines_ = std::make_unique<Pipelines>(*ctx_);
    stream_ = std::make_unique<Stream>(*ctx_);
    tuner_ = make_gemm_tuner(*ctx_);
  } catch (const vk::SystemError& e) {
    throw DeviceError("vulkan:" + std::to_string(index) + ": device setup failed: " + e.what());
  }
}

VulkanBackend::~VulkanBackend() {
  index_fault_.reset();
  tuner_.reset();
  stream_.reset();
  pipelines_.reset();
  staging_.reset();
  memory_.reset();
}

void VulkanBackend::release_finished() {
  std::uint64_t done = stream_->completed_serial();
  memory_->collect(done);
  staging_->collect(done);
}

void* VulkanBackend::allocate(std::size_t nbytes) {
  std::lock_guard lk(mu_);
  release_finished();
  return memory_->allocate(nbytes);
}

void VulkanBackend::deallocate(void* data, std::size_t) {
  std::lock_guard lk(mu_);
  memory_->release(static_cast<Allocation*>(data), stream_->recording_serial());
}

void VulkanBackend::write(Storage& dst, std::size_t off, const void* src, std::size_t n) {
  if (n == 0) return;
  std::lock_guard lk(mu_);
  // Staged and recorded in order with the kernels: no submission needed here.
  Allocation* stage = staging_->allocate(n);
  std::memcpy(stage->mapped, src, n);
  stream_->copy(*stage, 0, *static_cast<Allocation*>(dst.data()), off, n);
  staging_->release(stage, stream_->recording_serial());
  ++uploads_;
}

void VulkanBackend::read(const Storage& src, std::size_t off, void* dst, std::size_t n) {
  if (n == 0) return;
  std::lock_guard lk(mu_);
  Allocation* stage = staging_->allocate(n);
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
  Allocation* fault = queue_index_fault_read();
  stream_->wait_all();
  release_finished();
  raise_index_fault(fault);
}

// Gather kernels cannot throw: one that meets an index outside [0, n) skips it
// and records it in index_fault_. The host looks at the record whenever it
// waits for the device anyway, and raises the error there (as CUDA reports
// device-side asserts), so a training step stays free of extra reads.
TensorArg VulkanBackend::index_fault_operand() {
  if (!index_fault_) {
    index_fault_ = std::make_shared<Storage>(device(), sizeof(IndexFault));
    fill({index_fault_.get(), DType::i32, &kIndexFaultLayout}, 0);
  }
  std::lock_guard lk(mu_);
  index_kernels_pending_ = true;
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
                               f.kernel == 1 ? "index_select" : "index_add", f.index, f.n, device().str()));
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
  return s;
}

void VulkanBackend::launch(const std::string& shader, const std::vector<std::uint32_t>& spec,
                           std::span<const Operand> operands, const void* push, std::uint32_t push_bytes,
                           std::uint32_t gx, std::uint32_t gy, std::uint32_t gz) {
  std::lock_guard lk(mu_);
  if (operands.size() > kMaxBindings) throw Error(shader + ": more operands than the pipeline layout's bindings");
  Binding bindings[kMaxBindings];
  const std::uint32_t used = std::max<std::uint32_t>(kMinBindings, std::uint32_t(operands.size()));
  // Unused slots alias operand 0 so every binding the shader declares is valid.
  for (std::uint32_t i = 0; i < used; ++i) {
    const Operand& o = operands[i < operands.size() ? i : 0];
    bindings[i] = {static_cast<const Allocation*>(o.arg.storage->data()), i < operands.size() && o.written};
  }
  vk::Pipeline p = pipelines_->get(shader, spec);
  if (profiling_) {
    std::string label = shader + "/" + std::to_string(spec.size() > 1 ? spec[1] : 0) + " grid " +
                        std::to_string(gx) + "x" + std::to_string(gy) + "x" + std::to_string(gz);
    stream_->dispatch(p, pipelines_->layout(), std::span<const Binding>(bindings, used), push, push_bytes, gx, gy, gz, &label);
    return;
  }
  stream_->dispatch(p, pipelines_->layout(), std::span<const Binding>(bindings, used), push, push_bytes, gx, gy, gz);
}

}  // namespace rumus::vulkan
