#pragma once
// MNIST-format datasets (MNIST, Fashion-MNIST): 28x28 u8 images and u8 labels.
#include <optional>
#include <string>

#include "rumus/data/dataset.hpp"
#include "rumus/core/export.hpp"

RUMUS_API_BEGIN

namespace rumus::data {

enum class Split { Train, Test };

// x -> (x - mean) / std, applied after scaling pixels to [0, 1].
struct Normalize {
  double mean = 0.0, std = 1.0;
  // The mean and standard deviation of u8 pixels scaled to [0, 1].
  static Normalize fit(const Tensor& u8_images);
};

// Reads {train,t10k}-{images-idx3,labels-idx1}-ubyte, with or without .gz, from `dir`.
// Batches: x f32 [n, 1, rows, cols] in [0, 1] (then normalised), y i64 [n].
class Mnist : public Dataset {
 public:
  Mnist(const std::string& dir, Split split, std::optional<Normalize> normalize = {});
  std::int64_t size() const override { return images_.size(0); }
  Batch get_batch(const std::vector<std::int64_t>& indices) const override;
  const Tensor& images() const { return images_; }  // u8 [N, rows, cols]
  const Tensor& labels() const { return labels_; }  // u8 [N]
  void set_normalize(std::optional<Normalize> n) { normalize_ = n; }

 private:
  Tensor images_, labels_;
  std::optional<Normalize> normalize_;
};

}  // namespace rumus::data

RUMUS_API_END
