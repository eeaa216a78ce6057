#pragma once
#include <array>

#include "rumus/core/tensor.hpp"
#include "rumus/core/export.hpp"

RUMUS_API_BEGIN

namespace rumus {

struct Pool2dOptions {
  std::array<std::int64_t, 2> kernel{2, 2};
  std::array<std::int64_t, 2> stride{0, 0};  // 0 = kernel size, as PyTorch's default
  std::array<std::int64_t, 2> padding{0, 0};
  bool count_include_pad = true;  // avg_pool2d only
  std::array<std::int64_t, 2> dilation{1, 1};  // max_pool2d only
  bool ceil_mode = false;  // round the output size up, as PyTorch's ceil_mode
};

Tensor max_pool2d(const Tensor& input, const Pool2dOptions& options);
Tensor max_pool2d(const Tensor& input, std::int64_t kernel);
Tensor avg_pool2d(const Tensor& input, const Pool2dOptions& options);
Tensor avg_pool2d(const Tensor& input, std::int64_t kernel);
// Input [N, C, H, W] or [C, H, W].
Tensor adaptive_avg_pool2d(const Tensor& input, std::array<std::int64_t, 2> output_size);

}  // namespace rumus

RUMUS_API_END
