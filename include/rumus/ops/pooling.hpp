#pragma once
#include <array>

#include "rumus/core/tensor.hpp"

namespace rumus {

struct Pool2dOptions {
  std::array<std::int64_t, 2> kernel{2, 2};
  std::array<std::int64_t, 2> stride{0, 0};  // 0 = kernel size, as PyTorch's default
  std::array<std::int64_t, 2> padding{0, 0};
  bool count_include_pad = true;  // avg_pool2d only
};

Tensor max_pool2d(const Tensor& input, const Pool2dOptions& options);
Tensor max_pool2d(const Tensor& input, std::int64_t kernel);
Tensor avg_pool2d(const Tensor& input, const Pool2dOptions& options);
Tensor avg_pool2d(const Tensor& input, std::int64_t kernel);
Tensor adaptive_avg_pool2d(const Tensor& input, std::array<std::int64_t, 2> output_size);

}  // namespace rumus
