// The f32 GEMM's tile by measurement: GemmTuner (gemm_tuner.cpp) decides and
// caches; this file times a candidate on the device with timestamp queries.
#include <algorithm>
#include <limits>

#include "../gemm.hpp"
#include "kernels.hpp"
#include "vulkan_backend.hpp"

namespace rumus::vulkan {

namespace {
constexpr std::uint32_t kTimedRuns = 3;                          // after one warm-up run
constexpr std::size_t kScratchLimit = std::size_t(256) << 20;   // bytes of scratch C per timing

// Sets the calling thread's tile override for one scope.
struct ForcedTile {
  explicit ForcedTile(const GemmTile& t) { gemm_tile_override() = t; }
  ~ForcedTile() { gemm_tile_override().reset(); }
};

std::optional<double> time_gemm_tile(VulkanBackend& backend, const GemmArgs& g, const GemmTile& tile);
}  // namespace

std::optional<GemmTile> gemm_tile_for(VulkanBackend& vk, const GemmArgs& g, const GemmTile& heuristic) {
  if (auto forced = gemm_tile_override()) return forced;
  if (g.k == 0) return std::nullopt;
  // The tuner times f32 products; 16-bit ones keep the heuristic's tile.
  if (g.a.dtype != DType::f32 || g.b.dtype != DType::f32 || g.c.dtype != DType::f32) return std::nullopt;
  auto splits = [&](const GemmTile& t) {
    return gemm_splits_k(((g.m + t.bm - 1) / t.bm) * ((g.n + t.bn - 1) / t.bn) * g.batch, g.k);
  };
  // Split-K allocates and sums partial products on every call, a cost kernel
  // timestamps miss (measured on an H200: the tuner's split-K picks ran slower
  // in loops of products than the heuristic's), so those shapes keep it.
  if (splits(heuristic)) return std::nullopt;
  std::vector<GemmTile> candidates;
  for (const GemmTile& t : gemm_tile_candidates())
    if (!splits(t)) candidates.push_back(t);
  const std::string key = gemm_shape_class(g.m, g.n, g.k, g.batch, g.trans_a, g.trans_b);
  // Timing waits for the device, which a capture cannot: an earlier choice or the heuristic.
  if (vk.capturing()) return vk.gemm_tuner().cached(key);
  return vk.gemm_tuner().choose(key, candidates, [&](const GemmTile& t) { return time_gemm_tile(vk, g, t); });
}

namespace {
// One candidate's best time of a few runs on a scratch C, by GPU timestamps;
// nothing when the queue has no timestamps.
std::optional<double> time_gemm_tile(VulkanBackend& backend, const GemmArgs& g, const GemmTile& tile) {
  const Context& ctx = backend.context();
  const auto families = ctx.physical.getQueueFamilyProperties();
  if (!ctx.properties.limits.timestampComputeAndGraphics || families[ctx.queue_family].timestampValidBits == 0)
    return std::nullopt;
  // The product on the caller's A and B into a scratch C (beta = 0): C itself
  // must be written once only. Many batches are timed as one when C is large.
  GemmArgs s = g;
  if (std::size_t(s.batch * s.m * s.n) * 4 > kScratchLimit) s.batch = 1;
  if (std::size_t(s.batch * s.m * s.n) * 4 > kScratchLimit) return std::nullopt;
  Layout scratch_layout = Layout::contiguous({s.batch, s.m, s.n});
  Storage scratch(backend.device(), std::size_t(s.batch * s.m * s.n) * 4);
  s.c = {&scratch, DType::f32, &scratch_layout};
  s.ldc = s.n;
  s.stride_c = s.m * s.n;
  s.beta = 0;
  s.bias = {nullptr, DType::f32, nullptr};

  vk::QueryPool pool = ctx.device.createQueryPool({.queryType = vk::QueryType::eTimestamp, .queryCount = 2 * kTimedRuns});
  std::vector<std::uint64_t> ticks(2 * kTimedRuns);
  vk::Result result;
  try {
    ForcedTile forced(tile);
    gemm(backend, s);  // warm-up: pipeline creation and caches
    for (std::uint32_t r = 0; r < kTimedRuns; ++r) {
      backend.timestamp(pool, 2 * r);
      gemm(backend, s);
      backend.timestamp(pool, 2 * r + 1);
    }
    backend.wait_queue();
    result = ctx.device.getQueryPoolResults(pool, 0, 2 * kTimedRuns, ticks.size() * sizeof(std::uint64_t),
                                            ticks.data(), sizeof(std::uint64_t),
                                            vk::QueryResultFlagBits::e64 | vk::QueryResultFlagBits::eWait);
  } catch (...) {
    ctx.device.destroyQueryPool(pool);
    throw;
  }
  ctx.device.destroyQueryPool(pool);
  if (result != vk::Result::eSuccess) return std::nullopt;
  double best = std::numeric_limits<double>::infinity();
  for (std::uint32_t r = 0; r < kTimedRuns; ++r)
    best = std::min(best, double(ticks[2 * r + 1] - ticks[2 * r]) * ctx.properties.limits.timestampPeriod * 1e-6);
  return best;
}
}  // namespace

}  // namespace rumus::vulkan
