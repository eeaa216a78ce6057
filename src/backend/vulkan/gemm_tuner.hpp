#pragma once
// Tile choice for the f32 GEMM (shaders/gemm.comp) by measurement: on the first
// product of a (device, shape class, transposes) key, each candidate tile is
// timed and the fastest kept, in memory and in a small text file per device
// beside rumus's other caches, so later processes skip the timing.
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace rumus::vulkan {

// gemm.comp's specialisation: a bm x bn tile, K sliced by bk.
struct GemmTile {
  std::uint32_t bm = 128, bn = 128, bk = 8;
  bool operator==(const GemmTile&) const = default;
};

// Groups of invocations that share a bm x bn tile, each taking part of every
// K-slice (gemm.comp's sliced K): 4 for 64 x 64 tiles, whose 64 invocations
// alone leave the GPU's schedulers idle (measured on an H200, char_lm at
// context 128: 0.86-0.88M tokens/s with 4 x 4 blocks per invocation, 0.91-0.93M
// with 8 x 8 blocks in four groups), or as many as the device's workgroup
// limit allows (Vulkan promises 128 invocations, so at least 2); else 1.
// 32 x 32 tiles (16 invocations) take 8 groups: 128 invocations, which every
// device allows.
constexpr std::uint32_t gemm_tile_kslices(std::uint32_t bm, std::uint32_t bn, std::uint32_t max_invocations) {
  if (bm == 32 && bn == 32) return 8;
  if (bm != 64 || bn != 64) return 1;
  return max_invocations >= 256 ? 4 : 2;
}

// Every tile gemm.comp accepts: bm, bn in {64, 128} with bk in {8, 16}, but
// 64 x 64 with bk 32 (its groups then take 8 or 16 of each slice), and
// 32 x 32 with bk 32 (groups of 4).
std::vector<GemmTile> gemm_tile_candidates();
bool is_gemm_tile_candidate(const GemmTile& t);

// Whether the f32 GEMM splits K across workgroups (few output tiles, long K):
// then it also allocates and sums partial products, which GPU timestamps of
// the kernels do not show, so the tuner leaves such shapes alone.
// The shortest K that is split when the output has few tiles (384;
// RUMUS_VULKAN_GEMM_SPLIT_K_MIN=k for experiments); each slice then takes at
// least a quarter of it.
std::int64_t gemm_split_k_min();
inline bool gemm_splits_k(std::int64_t tiles, std::int64_t k) { return tiles < 132 && k >= gemm_split_k_min(); }
// K per slice for about `slices` slices, a whole number of the kernel's K-step `bk`.
inline std::uint32_t split_k_chunk(std::int64_t k, std::int64_t slices, std::uint32_t bk) {
  return std::uint32_t(((k + slices - 1) / slices + bk - 1) / bk * bk);
}

// A tile forced on the calling thread (while the tuner times a candidate, and
// in tests); when set, the f32 GEMM uses it instead of any other choice.
std::optional<GemmTile>& gemm_tile_override();
// The groups of 64 x 64 tiles forced on the calling thread (2 or 4), for
// tests of the split a device with a smaller workgroup limit gets.
std::optional<std::uint32_t>& gemm_kslices_override();

// Shapes whose sizes round up to the same powers of two share a choice.
std::string gemm_shape_class(std::int64_t m, std::int64_t n, std::int64_t k, std::int64_t batch, bool trans_a,
                             bool trans_b);

// The directory for rumus's caches: RUMUS_CACHE_DIR, else $XDG_CACHE_HOME/rumus,
// else $HOME/.cache/rumus; empty when none is set.
std::filesystem::path cache_directory();

class GemmTuner {
 public:
  // `device_id` names the device and driver exactly (a cache written under
  // another is ignored); `file` may be empty: then choices live in memory only.
  GemmTuner(std::string device_id, std::filesystem::path file, bool enabled);

  bool enabled() const { return enabled_; }
  void set_enabled(bool on) { enabled_ = on; }
  const std::filesystem::path& file() const { return file_; }
  // Why the file on disk was not used or could not be written; empty when all went well.
  std::string problem() const;

  // The cached tile for `key`, else (when enabled) the fastest of `candidates`
  // by `time_ms`, which returns a candidate's time or nothing when it cannot
  // time (then nothing is chosen or cached).
  std::optional<GemmTile> choose(const std::string& key, const std::vector<GemmTile>& candidates,
                                 const std::function<std::optional<double>(const GemmTile&)>& time_ms);
  std::optional<GemmTile> cached(const std::string& key) const;

 private:
  void load();
  void save();  // with mu_ held

  std::string device_id_;
  std::filesystem::path file_;
  bool enabled_;
  mutable std::mutex mu_;
  std::map<std::string, GemmTile> tiles_;
  std::string problem_;
  std::mutex tuning_;  // one measurement at a time: candidates must not share the GPU
};

}  // namespace rumus::vulkan
