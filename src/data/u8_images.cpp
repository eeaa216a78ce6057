#include "u8_images.hpp"

#include <fmt/format.h>

#include "rumus/ops/creation.hpp"

namespace rumus::data {

Batch u8_image_batch(const Tensor& images, const Tensor& labels, const std::vector<std::int64_t>& indices,
                     const Shape& item_shape, const std::optional<Normalize>& normalize, const char* op) {
  const std::int64_t n = std::int64_t(indices.size()), count = images.size(0);
  const std::int64_t pixels = count > 0 ? images.numel() / count : 0;
  Shape shape{n};
  shape.insert(shape.end(), item_shape.begin(), item_shape.end());
  Tensor x = empty(shape);
  Tensor y = empty({n}, {.dtype = DType::i64});
  const auto* img = static_cast<const std::uint8_t*>(images.storage().data());
  const auto* lab = static_cast<const std::uint8_t*>(labels.storage().data());
  auto* xp = static_cast<float*>(x.storage().data());
  auto* yp = static_cast<std::int64_t*>(y.storage().data());
  // One multiply-add per pixel: x = p * scale + shift.
  const Normalize nz = normalize.value_or(Normalize{});
  const float scale = float(1.0 / (255.0 * nz.std)), shift = float(-nz.mean / nz.std);
  for (std::int64_t i = 0; i < n; ++i) {
    const std::int64_t r = indices[std::size_t(i)];
    if (r < 0 || r >= count) throw Error(fmt::format("{}: index {} out of range for {} examples", op, r, count));
    const std::uint8_t* src = img + r * pixels;
    float* dst = xp + i * pixels;
    for (std::int64_t k = 0; k < pixels; ++k) dst[k] = float(src[k]) * scale + shift;
    yp[i] = lab[r];
  }
  return {x, y};
}

}  // namespace rumus::data
