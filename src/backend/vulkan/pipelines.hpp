#pragma once
// Compute pipelines built once per (shader, specialization constants) and
// kept for the device's lifetime, compiled through the on-disk pipeline cache. All share one layout: kMaxBindings
// storage buffers through push descriptors and kPushBytes of push constants.
#include <array>
#include <cstdint>
#include <filesystem>
#include <map>
#include <vector>

#include "context.hpp"
#include "pipeline_cache.hpp"
#include "shader_ids.hpp"

namespace rumus::vulkan {

// 24: Vulkan's least maxDescriptorSetStorageBuffers; optim_foreach.comp binds 6 x 4.
constexpr std::uint32_t kMaxBindings = 24;
// Bindings written on every dispatch (unused ones alias operand 0): the shaders
// of the older kernels declare up to 4 whether or not a variant reads them.
constexpr std::uint32_t kMinBindings = 4;
constexpr std::uint32_t kPushBytes = 128;  // the minimum every device guarantees (lavapipe's limit)

class Pipelines {
 public:
  // `cache_file`: where the driver's compiled pipelines persist (empty: in memory only).
  Pipelines(const Context& ctx, std::filesystem::path cache_file);
  ~Pipelines();
  // `spec` gives constant_id 0, 1, ... in order (0 is the workgroup size by convention).
  vk::Pipeline get(ShaderId shader, const std::vector<std::uint32_t>& spec);
  vk::PipelineLayout layout() const { return layout_; }
  PipelineCache& cache() { return cache_; }

 private:
  // One line on stderr: the driver's statistics of each executable of `pipeline`.
  void print_statistics(ShaderId shader, const std::vector<std::uint32_t>& spec, vk::Pipeline pipeline) const;

  const Context& ctx_;
  PipelineCache cache_;
  vk::DescriptorSetLayout set_layout_;
  vk::PipelineLayout layout_;
  std::array<vk::ShaderModule, kShaderCount> modules_{};  // made at a shader's first pipeline
  std::map<std::pair<ShaderId, std::vector<std::uint32_t>>, vk::Pipeline> pipelines_;
};

}  // namespace rumus::vulkan
