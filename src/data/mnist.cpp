#include "rumus/data/mnist.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cmath>
#include <filesystem>
#include <vector>

#include "rumus/data/idx.hpp"
#include "rumus/ops/creation.hpp"
#include "u8_images.hpp"

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
  return u8_image_batch(images_, labels_, indices, {1, images_.size(1), images_.size(2)}, normalize_, "Mnist");
}

}  // namespace rumus::data
