#pragma once
// The batch-norm family (src/ops/normalization.cpp): training-mode batch
// normalisation of a contiguous x viewed as [N, C, HW], statistics per channel
// over its N * HW values. Optional: where a device has none, ops compose it
// from pointwise kernels and reductions. A [C] operand whose storage is null
// is absent.
//
// Four kernels, not one each way: the statistics must be complete before any
// output is written (and the backward's two sums before any grad_x), and on a
// GPU a channel's sums are split over many workgroups; keeping the
// reductions and the per-element passes apart gives two reads of x forward
// and two reads of x and grad_out backward, and the reductions alone give the
// weight and bias gradients.
#include "kernel_registry.hpp"

namespace rumus {

// mean and invstd = 1 / sqrt(var + eps) per channel ([C]), var the biased
// batch variance. With running_mean and running_var ([C]) given, updates them
// in place: running = (1 - momentum) * running + momentum * batch, with the
// unbiased variance (PyTorch's rule).
struct BatchNormStatsKernel {
  static constexpr std::string_view name = "batch_norm_stats";
  using Fn = void(Backend&, TensorArg mean, TensorArg invstd, TensorArg running_mean, TensorArg running_var,
                  TensorArg x, double eps, double momentum);
};

// out = (x - mean) * invstd * weight + bias ([N, C, HW]).
struct BatchNormForwardKernel {
  static constexpr std::string_view name = "batch_norm_forward";
  using Fn = void(Backend&, TensorArg out, TensorArg x, TensorArg mean, TensorArg invstd, TensorArg weight,
                  TensorArg bias);
};

// Per channel: sum_dy = sum of grad_out (the bias gradient) and sum_dy_xhat =
// sum of grad_out * (x - mean) * invstd (the weight gradient), one read of both.
struct BatchNormBackwardReduceKernel {
  static constexpr std::string_view name = "batch_norm_backward_reduce";
  using Fn = void(Backend&, TensorArg sum_dy, TensorArg sum_dy_xhat, TensorArg grad_out, TensorArg x, TensorArg mean,
                  TensorArg invstd);
};

// grad_x = weight * invstd * (grad_out - sum_dy / M - xhat * sum_dy_xhat / M),
// xhat = (x - mean) * invstd and M = N * HW.
struct BatchNormBackwardKernel {
  static constexpr std::string_view name = "batch_norm_backward";
  using Fn = void(Backend&, TensorArg grad_x, TensorArg grad_out, TensorArg x, TensorArg mean, TensorArg invstd,
                  TensorArg weight, TensorArg sum_dy, TensorArg sum_dy_xhat);
};

}  // namespace rumus
