#pragma once
// A batch of u8 images with u8 labels, as the image datasets (Mnist,
// Cifar10) hold them: the pixels scaled to [0, 1] and normalised in one
// multiply-add each, the labels widened to i64.
#include <cstdint>
#include <optional>
#include <vector>

#include "rumus/core/tensor.hpp"
#include "rumus/data/dataset.hpp"
#include "rumus/data/mnist.hpp"

namespace rumus::data {

// `images` u8 [N, ...] and `labels` u8 [N], contiguous; the batch's x is f32
// `item_shape` per example (as many elements as one image), y i64 [n].
// `op` names the dataset in the error for an index out of range.
Batch u8_image_batch(const Tensor& images, const Tensor& labels, const std::vector<std::int64_t>& indices,
                     const Shape& item_shape, const std::optional<Normalize>& normalize, const char* op);

}  // namespace rumus::data
