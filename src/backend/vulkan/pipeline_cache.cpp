#include "pipeline_cache.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <random>
#include <vector>

#include <fmt/format.h>

#include "../../core/env.hpp"
#include "gemm_tuner.hpp"  // cache_directory()

namespace rumus::vulkan {

namespace {
// VkPipelineCacheHeaderVersionOne: header size, header version, vendor,
// device (four u32 in host order), then the driver's 16-byte cache UUID.
constexpr std::size_t kHeaderBytes = 16 + VK_UUID_SIZE;

std::uint32_t word(std::span<const std::byte> data, std::size_t i) {
  std::uint32_t w;
  std::memcpy(&w, data.data() + 4 * i, 4);
  return w;
}

// The caches alive in this process. The devices are never destroyed (the
// device registry is leaked so storages may be freed during static
// destruction), so their caches are saved from an exit handler.
struct LiveCaches {
  std::mutex mu;
  std::vector<PipelineCache*> caches;
};
LiveCaches& live() {
  static LiveCaches* l = new LiveCaches;
  return *l;
}
void save_live_caches() {
  LiveCaches& l = live();
  std::lock_guard lk(l.mu);
  for (PipelineCache* c : l.caches) c->save();
}
}  // namespace

bool pipeline_cache_header_matches(std::span<const std::byte> data, const vk::PhysicalDeviceProperties& p) {
  if (data.size() < kHeaderBytes) return false;
  if (word(data, 0) < kHeaderBytes || word(data, 1) != std::uint32_t(vk::PipelineCacheHeaderVersion::eOne)) return false;
  if (word(data, 2) != p.vendorID || word(data, 3) != p.deviceID) return false;
  return std::memcmp(data.data() + 16, p.pipelineCacheUUID.data(), VK_UUID_SIZE) == 0;
}

std::filesystem::path pipeline_cache_file(const vk::PhysicalDeviceProperties& p) {
  if (env::off("RUMUS_VULKAN_PIPELINE_CACHE")) return {};
  std::filesystem::path dir = cache_directory();
  if (dir.empty()) return {};
  return dir / "vulkan" / fmt::format("pipelines_{:04x}_{:04x}.bin", p.vendorID, p.deviceID);
}

PipelineCache::PipelineCache(vk::Device device, const vk::PhysicalDeviceProperties& properties,
                             std::filesystem::path file)
    : device_(device), properties_(properties), file_(std::move(file)) {
  std::vector<std::byte> data;
  if (!file_.empty()) {
    std::ifstream in(file_, std::ios::binary);
    if (in) {
      std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      data.resize(bytes.size());
      std::memcpy(data.data(), bytes.data(), bytes.size());
      if (!pipeline_cache_header_matches(data, properties_)) {
        problem_ = "ignored the pipeline cache " + file_.string() + ": it was not written by this device and driver";
        data.clear();
        dirty_ = true;  // replace it at the next save
      }
    }
  }
  try {
    cache_ = device_.createPipelineCache({.initialDataSize = data.size(), .pInitialData = data.data()});
    loaded_ = !data.empty();
  } catch (const vk::SystemError& e) {  // a driver that rejects the data itself: start empty
    problem_ = "ignored the pipeline cache " + file_.string() + ": the driver rejected it (" + e.what() + ")";
    cache_ = device_.createPipelineCache({});
    dirty_ = true;
  }
  static std::once_flag at_exit;
  std::call_once(at_exit, [] { std::atexit(save_live_caches); });
  LiveCaches& l = live();
  std::lock_guard lk(l.mu);
  l.caches.push_back(this);
}

PipelineCache::~PipelineCache() {
  {
    LiveCaches& l = live();
    std::lock_guard lk(l.mu);
    l.caches.erase(std::remove(l.caches.begin(), l.caches.end(), this), l.caches.end());
  }
  save();
  device_.destroyPipelineCache(cache_);
}

void PipelineCache::added() {
  std::lock_guard lk(mu_);
  dirty_ = true;
}

bool PipelineCache::loaded() const {
  std::lock_guard lk(mu_);
  return loaded_;
}

std::string PipelineCache::problem() const {
  std::lock_guard lk(mu_);
  return problem_;
}

void PipelineCache::save() {
  std::lock_guard lk(mu_);
  if (file_.empty() || !dirty_) return;
  std::vector<std::uint8_t> data;
  try {
    data = device_.getPipelineCacheData(cache_);
  } catch (const vk::SystemError& e) {
    problem_ = std::string("could not read the pipeline cache's data: ") + e.what();
    return;
  }
  std::error_code ec;
  std::filesystem::create_directories(file_.parent_path(), ec);
  // A unique temporary renamed over the file: a reader sees the old or the new file, whole.
  std::mt19937 rng(std::random_device{}());
  const std::filesystem::path tmp =
      file_.string() + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(rng() & 0xffffff);
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(data.data()), std::streamsize(data.size()));
    out.flush();
    if (!out) {
      problem_ = "could not write the pipeline cache " + tmp.string();
      out.close();
      std::filesystem::remove(tmp, ec);
      return;
    }
  }
  std::filesystem::rename(tmp, file_, ec);
  if (ec) {
    problem_ = "could not rename " + tmp.string() + " to " + file_.string() + ": " + ec.message();
    std::filesystem::remove(tmp, ec);
    return;
  }
  dirty_ = false;
}

}  // namespace rumus::vulkan
