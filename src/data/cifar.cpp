#include "rumus/data/cifar.hpp"

#include <fmt/format.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <vector>

#include "rumus/ops/creation.hpp"
#include "u8_images.hpp"

namespace rumus::data {

namespace {
constexpr std::int64_t kPixels = 3 * 32 * 32;
constexpr std::int64_t kRecord = 1 + kPixels;  // the label byte, then the image

std::vector<std::string> files_of(const std::string& dir, Split split) {
  namespace fs = std::filesystem;
  std::vector<std::string> files;
  if (split == Split::Test) {
    files.push_back((fs::path(dir) / "test_batch.bin").string());
  } else {
    for (int i = 1; i <= 5; ++i) {
      fs::path p = fs::path(dir) / fmt::format("data_batch_{}.bin", i);
      if (fs::exists(p)) files.push_back(p.string());
    }
    if (files.empty())
      throw IoError(fmt::format("Cifar10: no training file in '{}' (looked for data_batch_1.bin to data_batch_5.bin)", dir));
  }
  return files;
}
}  // namespace

bool Cifar10::found_in(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  return fs::is_regular_file(fs::path(dir) / "data_batch_1.bin", ec) || fs::is_regular_file(fs::path(dir) / "test_batch.bin", ec);
}

Cifar10::Cifar10(const std::string& dir, Split split, std::optional<Normalize> normalize) : normalize_(normalize) {
  std::vector<char> records;
  for (const std::string& path : files_of(dir, split)) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw IoError(fmt::format("Cifar10: cannot read '{}'", path));
    std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (bytes.size() % kRecord != 0)
      throw IoError(fmt::format("Cifar10: '{}' holds {} bytes, expected a whole number of {}-byte records (a label "
                                "byte and a 3x32x32 image)",
                                path, bytes.size(), kRecord));
    for (std::size_t r = 0; r < bytes.size(); r += kRecord)
      if (auto label = std::uint8_t(bytes[r]); label > 9)
        throw IoError(fmt::format("Cifar10: '{}' record {} has label {}, expected 0 to 9", path, r / kRecord, label));
    records.insert(records.end(), bytes.begin(), bytes.end());
  }
  const std::int64_t n = std::int64_t(records.size()) / kRecord;
  images_ = empty({n, 3, 32, 32}, {.dtype = DType::u8});
  labels_ = empty({n}, {.dtype = DType::u8});
  auto* img = static_cast<std::uint8_t*>(images_.storage().data());
  auto* lab = static_cast<std::uint8_t*>(labels_.storage().data());
  for (std::int64_t i = 0; i < n; ++i) {
    lab[i] = std::uint8_t(records[std::size_t(i * kRecord)]);
    std::memcpy(img + i * kPixels, records.data() + i * kRecord + 1, kPixels);
  }
}

Batch Cifar10::get_batch(const std::vector<std::int64_t>& indices) const {
  return u8_image_batch(images_, labels_, indices, {3, 32, 32}, normalize_, "Cifar10");
}

}  // namespace rumus::data
