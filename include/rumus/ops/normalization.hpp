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

// torch.nn.functional.batch_norm of input [N, C] or [N, C, L] (BatchNorm1d):
// batch_norm2d of the same values viewed as [N, C, L, 1].
Tensor batch_norm1d(const Tensor& input, const Tensor& running_mean, const Tensor& running_var,
                    const Tensor& weight, const Tensor& bias, bool training, double momentum = 0.1,
                    double eps = 1e-5);

// torch.nn.functional.group_norm: input [N, C, *] normalised over each of
// num_groups groups of C / num_groups channels (and every position), then
// weight and bias [C] per channel (either may be undefined). Composed of
// differentiable ops: twice differentiable.
Tensor group_norm(const Tensor& input, std::int64_t num_groups, const Tensor& weight = {}, const Tensor& bias = {},
                  double eps = 1e-5);

// torch.nn.functional.instance_norm: input [N, C, *] normalised per sample and
// channel over the positions (group_norm with one channel per group), then
// weight and bias [C] (either may be undefined). With use_input_stats and
// running_mean/running_var defined, they are updated in place as PyTorch's
// (the batch's mean of each instance's mean and unbiased variance);
// without use_input_stats the running statistics normalise. Composed of
// differentiable ops: twice differentiable.
Tensor instance_norm(const Tensor& input, const Tensor& running_mean = {}, const Tensor& running_var = {},
                     const Tensor& weight = {}, const Tensor& bias = {}, bool use_input_stats = true,
                     double momentum = 0.1, double eps = 1e-5);
// Normalises over the trailing dims given by normalized_shape; weight/bias may be undefined.
Tensor layer_norm(const Tensor& input, const Shape& normalized_shape, const Tensor& weight = {},
                  const Tensor& bias = {}, double eps = 1e-5);

}  // namespace rumus

RUMUS_API_END
