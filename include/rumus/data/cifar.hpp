#pragma once
// CIFAR-10 in its binary format: files of records of one label byte and a
// 32x32 RGB image (1024 red, then 1024 green, then 1024 blue bytes).
#include <optional>
#include <string>

#include "rumus/core/export.hpp"
#include "rumus/data/dataset.hpp"
#include "rumus/data/mnist.hpp"  // Split, Normalize

RUMUS_API_BEGIN

namespace rumus::data {

// Reads data_batch_1.bin ... data_batch_5.bin (Split::Train: those present,
// at least one) or test_batch.bin (Split::Test) from `dir`.
// Batches: x f32 [n, 3, 32, 32] in [0, 1] (then normalised), y i64 [n].
class Cifar10 : public Dataset {
 public:
  Cifar10(const std::string& dir, Split split, std::optional<Normalize> normalize = {});
  // Whether `dir` holds CIFAR-10 binary files (its data_batch_1.bin or test_batch.bin).
  static bool found_in(const std::string& dir);
  std::int64_t size() const override { return images_.size(0); }
  Batch get_batch(const std::vector<std::int64_t>& indices) const override;
  const Tensor& images() const { return images_; }  // u8 [N, 3, 32, 32]
  const Tensor& labels() const { return labels_; }  // u8 [N], 0 to 9
  void set_normalize(std::optional<Normalize> n) { normalize_ = n; }

 private:
  Tensor images_, labels_;
  std::optional<Normalize> normalize_;
};

}  // namespace rumus::data

RUMUS_API_END
