// GEMM tile tuning: candidates, shape classes and the per-device cache file.
#include "gemm_tuner.hpp"
#include "../../core/env.hpp"

#include <unistd.h>

#include <bit>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <random>
#include <sstream>
#include <system_error>

namespace rumus::vulkan {

namespace {
// Version 3: 64 x 64 tiles run sliced K with bk 32; files timed before are
// retuned. (32 x 32 tiles came later: a file's choices among the others stand.)
constexpr const char* kMagic = "rumus gemm tiles 3";

unsigned ceil_log2(std::int64_t x) { return x <= 1 ? 0 : unsigned(std::bit_width(std::uint64_t(x - 1))); }
}  // namespace

std::vector<GemmTile> gemm_tile_candidates() {
  std::vector<GemmTile> out;
  for (std::uint32_t bm : {64u, 128u})
    for (std::uint32_t bn : {64u, 128u})
      for (std::uint32_t bk : {8u, 16u, 32u})
        if ((bm == 64 && bn == 64) == (bk == 32)) out.push_back({bm, bn, bk});
  out.push_back({32, 32, 32});
  return out;
}

std::optional<std::uint32_t>& gemm_kslices_override() {
  thread_local std::optional<std::uint32_t> groups;
  return groups;
}

std::optional<GemmTile>& gemm_tile_override() {
  thread_local std::optional<GemmTile> tile;
  return tile;
}

bool is_gemm_tile_candidate(const GemmTile& t) {
  for (const GemmTile& c : gemm_tile_candidates())
    if (c == t) return true;
  return false;
}

std::string gemm_shape_class(std::int64_t m, std::int64_t n, std::int64_t k, std::int64_t batch, bool trans_a,
                             bool trans_b) {
  std::ostringstream s;
  s << "m" << ceil_log2(m) << ".n" << ceil_log2(n) << ".k" << ceil_log2(k) << ".b" << ceil_log2(batch) << ".t"
    << (trans_a ? 1 : 0) << (trans_b ? 1 : 0);
  return s.str();
}

std::filesystem::path cache_directory() {
  if (auto d = env::text("RUMUS_CACHE_DIR")) return *d;
  if (auto d = env::text("XDG_CACHE_HOME")) return std::filesystem::path(*d) / "rumus";
  if (auto d = env::text("HOME")) return std::filesystem::path(*d) / ".cache" / "rumus";
  return {};
}

GemmTuner::GemmTuner(std::string device_id, std::filesystem::path file, bool enabled)
    : device_id_(std::move(device_id)), file_(std::move(file)), enabled_(enabled) {
  // Spaces would split the header line; ids come from numbers and names.
  for (char& c : device_id_)
    if (c == ' ' || c == '\n') c = '_';
  load();
}

std::string GemmTuner::problem() const {
  std::lock_guard lk(mu_);
  return problem_;
}

std::optional<GemmTile> GemmTuner::cached(const std::string& key) const {
  std::lock_guard lk(mu_);
  auto it = tiles_.find(key);
  if (it == tiles_.end()) return std::nullopt;
  return it->second;
}

// The file: the magic line, "device <id>", then "<shape class> <bm> <bn> <bk>"
// per line. Anything else makes the whole file untrusted: it is ignored (and
// rewritten at the next choice), never half-used.
void GemmTuner::load() {
  if (file_.empty()) return;
  std::ifstream in(file_);
  if (!in) return;  // no file yet
  auto ignore = [&](const std::string& why) {
    tiles_.clear();
    problem_ = "ignored the GEMM tile cache " + file_.string() + ": " + why;
  };
  std::string line;
  if (!std::getline(in, line) || line != kMagic) return ignore("it does not start with \"" + std::string(kMagic) + "\"");
  if (!std::getline(in, line) || line.rfind("device ", 0) != 0)
    return ignore("its second line does not name the device");
  if (line.substr(7) != device_id_)
    return ignore("it was written for another device or driver (" + line.substr(7) + ", this is " + device_id_ + ")");
  int number = 2;
  while (std::getline(in, line)) {
    ++number;
    if (line.empty()) continue;
    std::istringstream fields(line);
    std::string key, extra;
    GemmTile t;
    if (!(fields >> key >> t.bm >> t.bn >> t.bk) || (fields >> extra) || !is_gemm_tile_candidate(t))
      return ignore("line " + std::to_string(number) + " is not \"<shape class> <bm> <bn> <bk>\" with a tile the kernel takes");
    tiles_[key] = t;
  }
}

void GemmTuner::save() {
  if (file_.empty()) return;
  std::error_code ec;
  std::filesystem::create_directories(file_.parent_path(), ec);
  // A unique temporary, renamed over the file: readers see the old or the new file, whole.
  std::mt19937 rng(std::random_device{}());
  const std::filesystem::path tmp =
      file_.string() + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(rng() & 0xffffff);
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << kMagic << "\ndevice " << device_id_ << "\n";
    for (const auto& [key, t] : tiles_) out << key << " " << t.bm << " " << t.bn << " " << t.bk << "\n";
    out.flush();
    if (!out) {
      problem_ = "could not write the GEMM tile cache " + tmp.string() + "; the choices stay in memory";
      out.close();
      std::filesystem::remove(tmp, ec);
      return;
    }
  }
  std::filesystem::rename(tmp, file_, ec);
  if (ec) {
    problem_ = "could not rename " + tmp.string() + " to " + file_.string() + ": " + ec.message();
    std::filesystem::remove(tmp, ec);
  }
}

std::optional<GemmTile> GemmTuner::choose(const std::string& key, const std::vector<GemmTile>& candidates,
                                          const std::function<std::optional<double>(const GemmTile&)>& time_ms) {
  if (auto t = cached(key)) return t;
  if (!enabled_ || candidates.empty()) return std::nullopt;
  std::lock_guard tuning(tuning_);
  if (auto t = cached(key)) return t;  // another thread measured it meanwhile
  std::optional<GemmTile> best;
  double best_ms = 0;
  for (const GemmTile& c : candidates) {
    std::optional<double> ms = time_ms(c);
    if (!ms) return std::nullopt;
    if (!best || *ms < best_ms) {
      best = c;
      best_ms = *ms;
    }
  }
  std::lock_guard lk(mu_);
  tiles_[key] = *best;
  save();
  return best;
}

std::int64_t gemm_split_k_min() {
  static const std::int64_t k = [] {
    const std::int64_t v = env::integer("RUMUS_VULKAN_GEMM_SPLIT_K_MIN").value_or(0);
    // 1024 left small-batch MLP steps on 8 workgroups (bench/RESULTS.md at
    // 7280857). 384 against 256 on an H100, four rounds on two machines: the
    // MNIST MLP at batch 64 1.017x (its 784- and 512-long products in fewer
    // slices), the MLP at 512, the CNN and ResNet-18 (f32, amp) level.
    return v >= 16 ? v : std::int64_t(384);
  }();
  return k;
}

}  // namespace rumus::vulkan
