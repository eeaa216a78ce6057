// Shader modules from the embedded SPIR-V, pipelines keyed by specialization.
#include "pipelines.hpp"

#include <cstdio>
#include <string>
#include <utility>

#include "rumus/core/error.hpp"

namespace rumus::vulkan {

Pipelines::Pipelines(const Context& ctx, std::filesystem::path cache_file)
    : ctx_(ctx), cache_(ctx.device, ctx.properties, std::move(cache_file)) {
  vk::DescriptorSetLayoutBinding bindings[kMaxBindings];
  for (std::uint32_t i = 0; i < kMaxBindings; ++i)
    bindings[i] = vk::DescriptorSetLayoutBinding{.binding = i, .descriptorType = vk::DescriptorType::eStorageBuffer, .descriptorCount = 1,
                   .stageFlags = vk::ShaderStageFlagBits::eCompute};
  set_layout_ = ctx_.device.createDescriptorSetLayout(
      {.flags = vk::DescriptorSetLayoutCreateFlagBits::ePushDescriptorKHR, .bindingCount = kMaxBindings,
       .pBindings = bindings});
  vk::PushConstantRange range{.stageFlags = vk::ShaderStageFlagBits::eCompute, .offset = 0, .size = kPushBytes};
  layout_ = ctx_.device.createPipelineLayout(
      {.setLayoutCount = 1, .pSetLayouts = &set_layout_, .pushConstantRangeCount = 1, .pPushConstantRanges = &range});
}

Pipelines::~Pipelines() {
  for (auto& [key, p] : pipelines_) ctx_.device.destroyPipeline(p);
  for (vk::ShaderModule m : modules_)
    if (m) ctx_.device.destroyShaderModule(m);
  ctx_.device.destroyPipelineLayout(layout_);
  ctx_.device.destroyDescriptorSetLayout(set_layout_);
}

vk::Pipeline Pipelines::get(ShaderId shader, const std::vector<std::uint32_t>& spec) {
  auto key = std::make_pair(shader, spec);
  if (auto it = pipelines_.find(key); it != pipelines_.end()) return it->second;

  vk::ShaderModule& mod = modules_[std::size_t(shader)];
  if (!mod) {
    const std::span<const std::uint32_t> code = kShaderSpirv[std::size_t(shader)];
    mod = ctx_.device.createShaderModule({.codeSize = code.size_bytes(), .pCode = code.data()});
  }
  std::vector<vk::SpecializationMapEntry> entries(spec.size());
  for (std::uint32_t i = 0; i < spec.size(); ++i) entries[i] = vk::SpecializationMapEntry{.constantID = i, .offset = 4 * i, .size = 4};
  vk::SpecializationInfo info{.mapEntryCount = std::uint32_t(entries.size()), .pMapEntries = entries.data(),
                              .dataSize = spec.size() * 4, .pData = spec.data()};
  vk::ComputePipelineCreateInfo create{
      .flags = ctx_.pipeline_statistics ? vk::PipelineCreateFlagBits::eCaptureStatisticsKHR : vk::PipelineCreateFlags{},
      .stage = {.stage = vk::ShaderStageFlagBits::eCompute, .module = mod, .pName = "main",
                .pSpecializationInfo = &info},
      .layout = layout_};
  auto [result, pipeline] = ctx_.device.createComputePipeline(cache_.handle(), create);
  if (result != vk::Result::eSuccess)
    throw DeviceError("vulkan: creating a pipeline for " + std::string(shader_name(shader)) + " failed");
  cache_.added();
  pipelines_.emplace(std::move(key), pipeline);
  if (ctx_.pipeline_statistics) print_statistics(shader, spec, pipeline);
  return pipeline;
}

void Pipelines::print_statistics(ShaderId shader, const std::vector<std::uint32_t>& spec,
                                 vk::Pipeline pipeline) const {
  std::string line = "vulkan pipeline " + std::string(shader_name(shader)) + " spec";
  for (std::uint32_t v : spec) line += " " + std::to_string(v);
  line += ":";
  const auto executables = ctx_.device.getPipelineExecutablePropertiesKHR({.pipeline = pipeline});
  for (std::uint32_t e = 0; e < executables.size(); ++e)
    for (const auto& s : ctx_.device.getPipelineExecutableStatisticsKHR({.pipeline = pipeline, .executableIndex = e})) {
      line += std::string(" ") + s.name.data() + "=";
      switch (s.format) {
        case vk::PipelineExecutableStatisticFormatKHR::eBool32: line += s.value.b32 ? "true" : "false"; break;
        case vk::PipelineExecutableStatisticFormatKHR::eInt64: line += std::to_string(s.value.i64); break;
        case vk::PipelineExecutableStatisticFormatKHR::eUint64: line += std::to_string(s.value.u64); break;
        case vk::PipelineExecutableStatisticFormatKHR::eFloat64: line += std::to_string(s.value.f64); break;
      }
      line += ";";
    }
  std::fprintf(stderr, "%s\n", line.c_str());
}

}  // namespace rumus::vulkan
