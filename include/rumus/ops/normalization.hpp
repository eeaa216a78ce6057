#pragma once
#include <vector>

#include "rumus/core/tensor.hpp"
#include "rumus/core/export.hpp"

RUMUS_API_BEGIN

namespace rumus {

// input [N, C, H, W]. In training, normalises by batch statistics and updates
// running_mean/running_var in place (unbiased variance, as PyTorch) when defined;
// in eval, uses the running statistics. weight/bias [C] may be undefined (no affine).
Tensor batch_norm2d(const Tensor& input, const Tensor& running_mean, const Tensor& running_var,
                    const Tensor& weight, const Tensor& bias, bool training, double momentum = 0.1,
                    double eps = 1e-5);

// Normalises over the trailing dims given by normalized_shape; weight/bias may be undefined.
Tensor layer_norm(const Tensor& input, const Shape& normalized_shape, const Tensor& weight = {},
                  const Tensor& bias = {}, double eps = 1e-5);

}  // namespace rumus

RUMUS_API_END
