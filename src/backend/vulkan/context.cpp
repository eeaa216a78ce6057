// Instance creation, device ordering and logical-device setup.
#include "context.hpp"

#include <algorithm>
#include <cstdlib>
#include <mutex>
#include <optional>
#include <string_view>

#include "../../core/env.hpp"
#include "rumus/core/error.hpp"

VULKAN_HPP_DEFAULT_DISPATCH_LOADER_DYNAMIC_STORAGE

namespace rumus {

namespace vulkan {

namespace {

int type_rank(vk::PhysicalDeviceType t) {
  switch (t) {
    case vk::PhysicalDeviceType::eDiscreteGpu: return 0;
    case vk::PhysicalDeviceType::eIntegratedGpu: return 1;
    case vk::PhysicalDeviceType::eVirtualGpu: return 2;
    case vk::PhysicalDeviceType::eCpu: return 4;
    default: return 3;
  }
}

// The loader (libvulkan.so.1) is opened at run time, not linked: a program
// built with the Vulkan backend runs, on the CPU, where no loader is installed,
// and neither rumus nor its users link against one.
PFN_vkGetInstanceProcAddr loader_entry_point() {
  static const auto entry = []() -> PFN_vkGetInstanceProcAddr {
    static std::optional<vk::DynamicLoader> loader;
    try {
      loader.emplace();
    } catch (const std::exception& e) {
      throw DeviceError(std::string("vulkan: no Vulkan device: the Vulkan loader libvulkan.so.1 could not be opened (") +
                        e.what() + "); install libvulkan1 and a driver, e.g. mesa-vulkan-drivers for lavapipe");
    }
    return loader->getProcAddress<PFN_vkGetInstanceProcAddr>("vkGetInstanceProcAddr");
  }();
  return entry;
}

Instance make_instance() {
  VULKAN_HPP_DEFAULT_DISPATCHER.init(loader_entry_point());
  vk::ApplicationInfo app{.pApplicationName = "rumus", .pEngineName = "rumus", .apiVersion = VK_API_VERSION_1_2};
  Instance inst;
  try {
    inst.instance = vk::createInstance(vk::InstanceCreateInfo{.pApplicationInfo = &app});
  } catch (const vk::SystemError& e) {
    throw DeviceError(std::string("vulkan: no Vulkan device: no driver could be loaded (vkCreateInstance: ") + e.what() +
                      "); install a driver, e.g. mesa-vulkan-drivers for the CPU driver lavapipe");
  }
  VULKAN_HPP_DEFAULT_DISPATCHER.init(inst.instance);
  auto all = inst.instance.enumeratePhysicalDevices();
  std::vector<vk::PhysicalDevice> ordered(all.begin(), all.end());
  std::stable_sort(ordered.begin(), ordered.end(), [](vk::PhysicalDevice a, vk::PhysicalDevice b) {
    return type_rank(a.getProperties().deviceType) < type_rank(b.getProperties().deviceType);
  });
  if (const auto chosen = env::text("RUMUS_VULKAN_DEVICE")) {
    char* end = nullptr;
    long want = std::strtol(chosen->c_str(), &end, 10);
    if (*end != '\0' || want < 0 || want >= long(all.size()))
      throw DeviceError("vulkan: RUMUS_VULKAN_DEVICE must be an index in [0, " + std::to_string(all.size()) +
                        ") of the driver's device list, got \"" + *chosen + "\"");
    auto it = std::find(ordered.begin(), ordered.end(), all[std::size_t(want)]);
    std::rotate(ordered.begin(), it, it + 1);
  }
  inst.devices = std::move(ordered);
  return inst;
}

}  // namespace

Instance& instance() {
  // Leaked on purpose: tensors may be freed during static destruction.
  static Instance* inst = new Instance(make_instance());
  return *inst;
}

std::uint32_t Context::memory_type(std::uint32_t bits, vk::MemoryPropertyFlags required,
                                   vk::MemoryPropertyFlags preferred) const {
  // Among the types with the required flags: the preferred flags first, then
  // the largest heap (drivers also list small device-local windows, e.g. a BAR heap).
  int best = -1;
  auto score = [&](std::uint32_t i) {
    auto flags = memory.memoryTypes[i].propertyFlags;
    return std::make_pair((flags & preferred) == preferred, memory.memoryHeaps[memory.memoryTypes[i].heapIndex].size);
  };
  for (std::uint32_t i = 0; i < memory.memoryTypeCount; ++i) {
    if (!(bits & (1u << i))) continue;
    if ((memory.memoryTypes[i].propertyFlags & required) != required) continue;
    if (best < 0 || score(i) > score(std::uint32_t(best))) best = int(i);
  }
  if (best < 0) throw DeviceError("vulkan: " + name + " has no memory type with the flags " + vk::to_string(required));
  return std::uint32_t(best);
}

Context::Context(int index) {
  auto& inst = instance();
  const std::string dev = "vulkan:" + std::to_string(index);
  if (inst.devices.empty())
    throw DeviceError(dev + ": no Vulkan device found (a CPU driver such as lavapipe comes with mesa-vulkan-drivers)");
  if (index < 0 || index >= int(inst.devices.size()))
    throw DeviceError(dev + ": device index out of range: " + std::to_string(inst.devices.size()) +
                      " Vulkan device(s) found");
  physical = inst.devices[std::size_t(index)];
  properties = physical.getProperties();
  memory = physical.getMemoryProperties();
  name = properties.deviceName.data();

  auto families = physical.getQueueFamilyProperties();
  queue_family = ~0u;
  for (std::uint32_t i = 0; i < families.size() && queue_family == ~0u; ++i)
    if (families[i].queueFlags & vk::QueueFlagBits::eCompute) queue_family = i;
  if (queue_family == ~0u) throw DeviceError("vulkan: " + name + " has no compute queue");
  // A family for transfers alone drives the copy engines, which run beside
  // the kernels. Knob: RUMUS_VULKAN_TRANSFER_QUEUE=0 keeps copies on the compute queue.
  transfer_family = queue_family;
  if (!env::off("RUMUS_VULKAN_TRANSFER_QUEUE"))
    for (std::uint32_t i = 0; i < families.size(); ++i) {
      const auto flags = families[i].queueFlags;
      if ((flags & vk::QueueFlagBits::eTransfer) && !(flags & (vk::QueueFlagBits::eCompute | vk::QueueFlagBits::eGraphics)) &&
          families[i].queueCount > 0) {
        transfer_family = i;
        break;
      }
    }

  bool has_push = false, has_atomic_float = false, has_coopmat = false, has_statistics = false;
  bool has_memory_fd = false, has_semaphore_fd = false;
  for (auto& e : physical.enumerateDeviceExtensionProperties()) {
    std::string ext = e.extensionName.data();
    if (ext == VK_KHR_PUSH_DESCRIPTOR_EXTENSION_NAME) has_push = true;
    if (ext == VK_KHR_PIPELINE_EXECUTABLE_PROPERTIES_EXTENSION_NAME) has_statistics = true;
    if (ext == VK_EXT_SHADER_ATOMIC_FLOAT_EXTENSION_NAME) has_atomic_float = true;
    if (ext == VK_NV_COOPERATIVE_MATRIX_EXTENSION_NAME) has_coopmat = true;
    if (ext == VK_KHR_EXTERNAL_MEMORY_FD_EXTENSION_NAME) has_memory_fd = true;
    if (ext == VK_KHR_EXTERNAL_SEMAPHORE_FD_EXTENSION_NAME) has_semaphore_fd = true;
  }
  if (!has_push) throw DeviceError("vulkan: " + name + " lacks " VK_KHR_PUSH_DESCRIPTOR_EXTENSION_NAME);

  // Features the shaders use: 8/16-bit storage for u8/f16/bf16 tensors, 64-bit types for f64/i64.
  auto chain = physical.getFeatures2<vk::PhysicalDeviceFeatures2, vk::PhysicalDeviceVulkan11Features,
                                     vk::PhysicalDeviceVulkan12Features>();
  auto& f10 = chain.get<vk::PhysicalDeviceFeatures2>().features;
  auto& f11 = chain.get<vk::PhysicalDeviceVulkan11Features>();
  auto& f12 = chain.get<vk::PhysicalDeviceVulkan12Features>();
  auto need = [&](bool ok, const char* feature) {
    if (!ok) throw DeviceError("vulkan: " + name + " lacks the feature " + feature);
  };
  need(f10.shaderInt64, "shaderInt64");
  need(f10.shaderFloat64, "shaderFloat64");
  float64 = f10.shaderFloat64;
  need(f11.storageBuffer16BitAccess, "storageBuffer16BitAccess");
  need(f12.storageBuffer8BitAccess, "storageBuffer8BitAccess");
  need(f12.timelineSemaphore, "timelineSemaphore");

  vk::PhysicalDeviceFeatures2 want10{.features = {.shaderFloat64 = true, .shaderInt64 = true}};
  vk::PhysicalDeviceVulkan11Features want11{.storageBuffer16BitAccess = true};
  int64_atomics = f12.shaderBufferInt64Atomics;
  vk::PhysicalDeviceVulkan12Features want12{.storageBuffer8BitAccess = true, .shaderBufferInt64Atomics = int64_atomics,
                                            .timelineSemaphore = true};
  want10.pNext = &want11;
  want11.pNext = &want12;
  vk::PhysicalDeviceShaderAtomicFloatFeaturesEXT want_atomic{.shaderBufferFloat32AtomicAdd = true};
  std::vector<const char*> extensions = {VK_KHR_PUSH_DESCRIPTOR_EXTENSION_NAME};
  if (has_atomic_float) {
    auto af = physical.getFeatures2<vk::PhysicalDeviceFeatures2, vk::PhysicalDeviceShaderAtomicFloatFeaturesEXT>();
    // Test knob: RUMUS_VULKAN_FLOAT_ATOMICS=0 runs the kernels written for devices without them.
    float_atomics = af.get<vk::PhysicalDeviceShaderAtomicFloatFeaturesEXT>().shaderBufferFloat32AtomicAdd &&
                    !env::off("RUMUS_VULKAN_FLOAT_ATOMICS");
    float64_atomics = float_atomics && af.get<vk::PhysicalDeviceShaderAtomicFloatFeaturesEXT>().shaderBufferFloat64AtomicAdd;
  }
  want_atomic.shaderBufferFloat64AtomicAdd = float64_atomics;
  void** chain_end = &want12.pNext;
  if (float_atomics) {
    *chain_end = &want_atomic;
    chain_end = &want_atomic.pNext;
    extensions.push_back(VK_EXT_SHADER_ATOMIC_FLOAT_EXTENSION_NAME);
  }
  // Tensor cores: the f16 GEMM needs the cooperative-matrix feature and f16 arithmetic (packing halves).
  vk::PhysicalDeviceCooperativeMatrixFeaturesNV want_coopmat{.cooperativeMatrix = true};
  if (has_coopmat && f12.shaderFloat16) {
    auto cf = physical.getFeatures2<vk::PhysicalDeviceFeatures2, vk::PhysicalDeviceCooperativeMatrixFeaturesNV>();
    if (cf.get<vk::PhysicalDeviceCooperativeMatrixFeaturesNV>().cooperativeMatrix) {
      for (const auto& p : physical.getCooperativeMatrixPropertiesNV()) {
        auto type = [](vk::ComponentTypeNV t) {
          return t == vk::ComponentTypeNV::eFloat16   ? CoopMatType::f16
                 : t == vk::ComponentTypeNV::eFloat32 ? CoopMatType::f32
                                                      : CoopMatType::other;
        };
        coopmat_shapes.push_back({p.MSize, p.NSize, p.KSize, type(p.AType), type(p.BType), type(p.CType),
                                  type(p.DType), p.scope == vk::ScopeNV::eSubgroup});
      }
    }
  }
  if (!coopmat_shapes.empty()) {
    want12.shaderFloat16 = true;
    *chain_end = &want_coopmat;
    chain_end = &want_coopmat.pNext;
    extensions.push_back(VK_NV_COOPERATIVE_MATRIX_EXTENSION_NAME);
  }
  // Tuning knob: RUMUS_VULKAN_PIPELINE_STATS=1 prints what the driver reports
  // of each compiled kernel (registers, spills, shared memory) as it is built.
  vk::PhysicalDevicePipelineExecutablePropertiesFeaturesKHR want_statistics{.pipelineExecutableInfo = true};
  if (has_statistics && env::on("RUMUS_VULKAN_PIPELINE_STATS")) {
    pipeline_statistics = true;
    *chain_end = &want_statistics;
    extensions.push_back(VK_KHR_PIPELINE_EXECUTABLE_PROPERTIES_EXTENSION_NAME);
  }
  // Sharing with CUDA: opaque fds of buffer memory and of timeline semaphores.
  if (has_memory_fd && has_semaphore_fd) {
    const auto fd = vk::ExternalMemoryHandleTypeFlagBits::eOpaqueFd;
    const auto memory_features = physical
        .getExternalBufferProperties({.usage = vk::BufferUsageFlagBits::eTransferSrc | vk::BufferUsageFlagBits::eTransferDst,
                                      .handleType = fd})
        .externalMemoryProperties.externalMemoryFeatures;
    vk::SemaphoreTypeCreateInfo timeline{.semaphoreType = vk::SemaphoreType::eTimeline};
    const auto semaphore_features =
        physical
            .getExternalSemaphoreProperties(
                {.pNext = &timeline, .handleType = vk::ExternalSemaphoreHandleTypeFlagBits::eOpaqueFd})
            .externalSemaphoreFeatures;
    external_sharing = (memory_features & vk::ExternalMemoryFeatureFlagBits::eExportable) &&
                       (semaphore_features & vk::ExternalSemaphoreFeatureFlagBits::eExportable) &&
                       (semaphore_features & vk::ExternalSemaphoreFeatureFlagBits::eImportable);
  }
  if (external_sharing) {
    extensions.push_back(VK_KHR_EXTERNAL_MEMORY_FD_EXTENSION_NAME);
    extensions.push_back(VK_KHR_EXTERNAL_SEMAPHORE_FD_EXTENSION_NAME);
  }
  {
    auto ids = physical.getProperties2<vk::PhysicalDeviceProperties2, vk::PhysicalDeviceIDProperties>();
    const auto& id = ids.get<vk::PhysicalDeviceIDProperties>().deviceUUID;
    std::copy(id.begin(), id.end(), uuid.begin());
  }
  const float priorities[2] = {1.0f, 1.0f};
  const std::uint32_t transfer_queues = separate_transfer() ? std::min(families[transfer_family].queueCount, 2u) : 1u;
  vk::DeviceQueueCreateInfo queue_infos[2] = {
      {.queueFamilyIndex = queue_family, .queueCount = 1, .pQueuePriorities = priorities},
      {.queueFamilyIndex = transfer_family, .queueCount = transfer_queues, .pQueuePriorities = priorities}};
  device = physical.createDevice(vk::DeviceCreateInfo{.pNext = &want10,
                                                      .queueCreateInfoCount = separate_transfer() ? 2u : 1u,
                                                      .pQueueCreateInfos = queue_infos,
                                                      .enabledExtensionCount = std::uint32_t(extensions.size()),
                                                      .ppEnabledExtensionNames = extensions.data()});
  queue = device.getQueue(queue_family, 0);
  transfer_queue = device.getQueue(transfer_family, 0);
  upload_queue = device.getQueue(transfer_family, transfer_queues - 1);
  auto sub = physical.getProperties2<vk::PhysicalDeviceProperties2, vk::PhysicalDeviceSubgroupProperties>();
  const auto& subgroups = sub.get<vk::PhysicalDeviceSubgroupProperties>();
  subgroup_size = subgroups.subgroupSize;
  // Test knob: RUMUS_VULKAN_SUBGROUP_QUADS=0 runs the kernels written for devices without quads.
  subgroup_quad = (subgroups.supportedOperations & vk::SubgroupFeatureFlagBits::eQuad) &&
                  (subgroups.supportedStages & vk::ShaderStageFlagBits::eCompute) && subgroup_size % 4 == 0 &&
                  subgroup_size <= 256 && !env::off("RUMUS_VULKAN_SUBGROUP_QUADS");
  // Test knob: RUMUS_VULKAN_SUBGROUP_SHUFFLE=0 runs the kernels written for devices without shuffles.
  subgroup_shuffle = (subgroups.supportedOperations & vk::SubgroupFeatureFlagBits::eShuffle) &&
                     (subgroups.supportedStages & vk::ShaderStageFlagBits::eCompute) && subgroup_size >= 8 &&
                     !env::off("RUMUS_VULKAN_SUBGROUP_SHUFFLE");
  // Test knob: RUMUS_VULKAN_SUBGROUP_ARITHMETIC=0 runs the kernels written for devices without subgroup sums.
  subgroup_arithmetic = (subgroups.supportedOperations & vk::SubgroupFeatureFlagBits::eArithmetic) &&
                        (subgroups.supportedStages & vk::ShaderStageFlagBits::eCompute) &&
                        !env::off("RUMUS_VULKAN_SUBGROUP_ARITHMETIC");
  if (!coopmat_shapes.empty()) {
    // Tuning knob for benchmarks: RUMUS_VULKAN_COOPMAT_TILE="bm,bn,wm,wn[,bk]".
    coopmat_tile = choose_coopmat_tile(coopmat_shapes, subgroup_size, properties.limits.maxComputeSharedMemorySize,
                                       properties.limits.maxComputeWorkGroupInvocations,
                                       env::text("RUMUS_VULKAN_COOPMAT_TILE").value_or(""));
    for (const CoopMatShape& s : coopmat_shapes)
      if (s.subgroup_scope && s.m == 16 && s.n == 16 && s.k == 16 && s.a == CoopMatType::f16 &&
          s.b == CoopMatType::f16 && s.c == CoopMatType::f32 && s.d == CoopMatType::f32)
        coopmat_attention = subgroup_size == 32;
  }
}

Context::~Context() {
  device.waitIdle();
  device.destroy();
}

}  // namespace vulkan
}  // namespace rumus
