#pragma once
// One Vulkan instance per process; one Context (logical device + queue) per
// physical device in use.
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "gemm_coopmat.hpp"
#include "vk.hpp"

namespace rumus::vulkan {

// Physical devices in rumus order: RUMUS_VULKAN_DEVICE=<index> first if set,
// then discrete GPUs, integrated, virtual, others, CPU (software) last.
struct Instance {
  vk::Instance instance;
  std::vector<vk::PhysicalDevice> devices;
};
// Throws DeviceError when no loader, driver or device is present.
Instance& instance();

class Context {
 public:
  explicit Context(int index);
  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  vk::PhysicalDevice physical;
  vk::Device device;
  vk::Queue queue;
  std::uint32_t queue_family = 0;
  // Staging copies between device and host memory (transfer.hpp): a queue of
  // a transfer-only family (a GPU's copy engines) where the device has one,
  // else `queue` itself. Buffers are shared by both families (concurrent
  // sharing), so no ownership transfers are needed.
  vk::Queue transfer_queue;
  // Copies to the device: a second queue of the transfer family where it has
  // one (its own copy engine, so uploads overlap downloads in both directions
  // of the bus), else `transfer_queue` itself.
  vk::Queue upload_queue;
  std::uint32_t transfer_family = 0;
  bool separate_transfer() const { return transfer_family != queue_family; }
  vk::PhysicalDeviceProperties properties;
  vk::PhysicalDeviceMemoryProperties memory;
  std::uint32_t subgroup_size = 32;
  bool subgroup_quad = false;  // quad operations in compute shaders (attention_tiled_quad)
  bool subgroup_shuffle = false;  // shuffles in compute shaders, 8 lanes or more (attention_blocked)
  bool subgroup_arithmetic = false;  // subgroupAdd in compute shaders (layer_norm_sg)
  bool float_atomics = false;  // VK_EXT_shader_atomic_float: shaderBufferFloat32AtomicAdd
  bool float64_atomics = false;  // the same extension's shaderBufferFloat64AtomicAdd (f64 index_add)
  bool int64_atomics = false;    // shaderBufferInt64Atomics: f64 index_add by compare-and-swap otherwise
  bool float64 = false;          // shaderFloat64: double arithmetic in the kernels' f64 variants
  // VK_KHR_external_memory_fd and VK_KHR_external_semaphore_fd, with device
  // memory and timeline semaphores exportable as opaque fds: another API on
  // the same GPU (CUDA, for NcclGroup) can import them (interop.cpp).
  bool external_sharing = false;
  std::array<std::uint8_t, 16> uuid{};  // VkPhysicalDeviceIDProperties::deviceUUID
  bool pipeline_statistics = false;  // RUMUS_VULKAN_PIPELINE_STATS=1 on a driver that reports them
  // VK_NV_cooperative_matrix (enabled with shaderFloat16 when present): the
  // shapes the device offers, and the tensor-core GEMM's tile if one fits.
  std::vector<CoopMatShape> coopmat_shapes;
  std::optional<CoopMatTile> coopmat_tile;
  // 16 x 16 x 16 f16 -> f32 shapes on 32-lane subgroups: the f16 attention
  // kernel (shaders/attention_coopmat.comp) runs.
  bool coopmat_attention = false;
  std::string name;

  // A memory type with all `required` flags (and `preferred` ones if possible).
  std::uint32_t memory_type(std::uint32_t type_bits, vk::MemoryPropertyFlags required,
                            vk::MemoryPropertyFlags preferred = {}) const;
};

}  // namespace rumus::vulkan
