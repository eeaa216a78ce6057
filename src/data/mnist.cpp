#include "rumus/data/mnist.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cmath>
#include <filesystem>
#include <vector>

#include "rumus/data/idx.hpp"
#include "rumus/ops/creation.hpp"

namespace rumus::data {

namespace {
// The names the files go by: Debian/Zalando (train-images-idx3-ubyte) and
// some mirrors (train-images.idx3-ubyte), each raw or gzipped.
std::string find_file(const std::string& dir, const std::string& prefix, const std::string& kind) {
  std::vector<std::string> tried;
  for (const char* sep : {"-", "."})
    for (const char* ext : {"", ".gz"}) {
      std::string name = prefix + sep + kind + "-ubyte" + ext;
      auto path = std::filesystem::path(dir) / name;
      if (std::filesystem::exists(path)) return path.string();
      tried.push_back(name);
    }
  throw IoError(fmt::format("Mnist: no {} {} file in '{}' (looked for {})", prefix, kind.substr(0, kind.find('-')), dir,
                            fmt::join(tried, ", ")));
}
}  // namespace

Normalize Normalize::fit(const Tensor& images) {
  auto v = images.to_vector<std::uint8_t>();
  if (v.empty()) return {};
  double s = 0, s2 = 0;
  for (std::uint8_t p : v) s += p, s2 += double(p) * p;
  double n = double(v.size()), mean = s / n / 255.0;
  double var = s2 / n / (255.0 * 255.0) - mean * mean;
  return {mean, std::sqrt(std::max(var, 1e-12))};
}

Mnist::Mnist(const std::string& dir, Split split, std::optional<Normalize> normalize) : normalize_(normalize) {
  const std::string prefix = split == Split::Train ? "train" : "t10k";
  const std::string ipath = find_file(dir, prefix, "images-idx3"), lpath = find_file(dir, prefix, "labels-idx1");
  images_ = read_idx(ipath);
  labels_ = read_idx(lpath);
  if (images_.dtype() != DType::u8 || images_.dim() != 3)
    throw IoError(fmt::format("Mnist: '{}' holds {} {}, expected u8 images [N, rows, cols]", ipath,
                              dtype_name(images_.dtype()), shape_str(images_.shape())));
  if (labels_.dtype() != DType::u8 || labels_.dim() != 1)
    throw IoError(fmt::format("Mnist: '{}' holds {} {}, expected u8 labels [N]", lpath, dtype_name(labels_.dtype()),
                              shape_str(labels_.shape())));
  if (images_.size(0) != labels_.size(0))
    throw IoError(fmt::format("Mnist: '{}' has {} images but '{}' has {} labels", ipath, images_.size(0), lpath,
                              labels_.size(0)));
}

Batch Mnist::get_batch(const std::vector<std::int64_t>& indices) const {
  const std::int64_t n = std::int64_t(indices.size()), rows = images_.size(1), cols = images_.size(2);
  const std::int64_t pixels = rows * cols, count = images_.size(0);
  Tensor x = empty({n, 1, rows, cols});
  Tensor y = empty({n}, {.dtype = DType::i64});
  const auto* img = static_cast<const std::uint8_t*>(images_.storage().data());
  const auto* lab = static_cast<const std::uint8_t*>(labels_.storage().data());
  auto* xp = static_cast<float*>(x.storage().data());
  auto* yp = static_cast<std::int64_t*>(y.storage().data());
  // One multiply-add per pixel: x = p * scale + shift.
  const Normalize nz = normalize_.value_or(Normalize{});
  const float scale = float(1.0 / (255.0 * nz.std)), shift = float(-nz.mean / nz.std);
  for (std::int64_t i = 0; i < n; ++i) {
    std::int64_t r = indices[std::size_t(i)];
    if (r < 0 || r >= count) throw Error(fmt::format("Mnist: index {} out of range for {} examples", r, count));
    const std::uint8_t* src = img + r * pixels;
    float* dst = xp + i * pixels;
    for (std::int64_t k = 0; k < pixels; ++k) dst[k] = float(src[k]) * scale + shift;
    yp[i] = lab[r];
  }
  return {x, y};
}

}  // namespace rumus::data
