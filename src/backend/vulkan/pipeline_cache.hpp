#pragma once
// The driver's pipeline cache, kept on disk between processes, so that a
// second process finds its pipelines compiled instead of compiling them all
// again during its first steps. One file per device under the cache directory
// (RUMUS_CACHE_DIR); the data's own Vulkan header names the vendor, the device
// and the driver's cache UUID, and data of another driver is never handed over.
#include <cstddef>
#include <filesystem>
#include <mutex>
#include <span>
#include <string>

#include "vk.hpp"

namespace rumus::vulkan {

// Whether `data` starts with a version-one pipeline cache header of this
// device and driver (vendor, device, pipelineCacheUUID).
bool pipeline_cache_header_matches(std::span<const std::byte> data, const vk::PhysicalDeviceProperties& p);

// <cache directory>/vulkan/pipelines_<vendor>_<device>.bin; empty when there
// is no cache directory or RUMUS_VULKAN_PIPELINE_CACHE=0.
std::filesystem::path pipeline_cache_file(const vk::PhysicalDeviceProperties& p);

class PipelineCache {
 public:
  // Seeds the cache from `file` when it holds this device's data; an empty
  // path keeps the cache in memory only. Registers for save() at exit: the
  // devices live until the process ends.
  PipelineCache(vk::Device device, const vk::PhysicalDeviceProperties& properties, std::filesystem::path file);
  ~PipelineCache();  // saves, then destroys the cache
  PipelineCache(const PipelineCache&) = delete;
  PipelineCache& operator=(const PipelineCache&) = delete;

  vk::PipelineCache handle() const { return cache_; }
  // A pipeline was created through the cache: save() has something to write.
  void added();
  // Writes the cache's data if pipelines were added since the load or the last
  // save: to a temporary file, renamed over the old one. Never throws: a cache
  // that cannot be written only makes the next process start cold.
  void save();
  bool loaded() const;          // the file's data seeded the cache
  std::string problem() const;  // why the file was ignored or not written; "" if neither

 private:
  vk::Device device_;
  vk::PhysicalDeviceProperties properties_;
  std::filesystem::path file_;
  vk::PipelineCache cache_;
  mutable std::mutex mu_;
  bool loaded_ = false, dirty_ = false;
  std::string problem_;
};

}  // namespace rumus::vulkan
