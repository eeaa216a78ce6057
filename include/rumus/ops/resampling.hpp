#pragma once
// Resizing images and sequences: torch.nn.functional.interpolate,
// pixel_shuffle and pixel_unshuffle.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "rumus/core/tensor.hpp"
#include "rumus/core/export.hpp"

RUMUS_API_BEGIN

namespace rumus {

// Either `size` or `scale_factor`: one value for every spatial dim, or one per dim.
struct InterpolateOptions {
  std::vector<std::int64_t> size;
  std::vector<double> scale_factor;  // output size floor(input * factor); positions read at 1 / factor, as PyTorch
  std::string mode = "nearest";      // "nearest", "linear" (3-D input) or "bilinear" (4-D input)
  std::optional<bool> align_corners;  // linear modes only; false when not given
};

// input [N, C, L] or [N, C, H, W]. Gathers along each spatial dim (and a
// weighted sum of two neighbours for the linear modes): differentiable to any
// order on every device.
Tensor interpolate(const Tensor& input, const InterpolateOptions& options);

// [*, C * r * r, H, W] -> [*, C, H * r, W * r], and back: views and one copy.
Tensor pixel_shuffle(const Tensor& input, std::int64_t upscale_factor);
Tensor pixel_unshuffle(const Tensor& input, std::int64_t downscale_factor);

}  // namespace rumus

RUMUS_API_END
