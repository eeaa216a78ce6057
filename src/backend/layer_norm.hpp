#pragma once
// The layer-norm family (src/ops/normalization.cpp): layer normalisation over
// the last dim of contiguous [rows, d] views, one pass per row. Optional:
// where a device has none, ops compose it from pointwise kernels and
// reductions. A weight, bias, grad_weight or grad_bias ([d]) whose storage is
// null is absent.
#include "kernel_registry.hpp"

namespace rumus {

// out = (x - mean) * invstd * weight + bias, writing mean and invstd ([rows]) for backward.
struct LayerNormForwardKernel {
  static constexpr std::string_view name = "layer_norm_forward";
  using Fn = void(Backend&, TensorArg out, TensorArg mean, TensorArg invstd, TensorArg x,
                  TensorArg weight, TensorArg bias, double eps);
};

// Overwrites grad_x, grad_weight (sum over rows of grad_out * xhat) and grad_bias (sum of grad_out).
struct LayerNormBackwardKernel {
  static constexpr std::string_view name = "layer_norm_backward";
  using Fn = void(Backend&, TensorArg grad_x, TensorArg grad_weight, TensorArg grad_bias,
                  TensorArg grad_out, TensorArg x, TensorArg mean, TensorArg invstd, TensorArg weight);
};

}  // namespace rumus
