#pragma once
// The softmax family (src/ops/softmax.cpp): softmax or log-softmax along the
// last dim of contiguous [rows, cols] views.
#include "kernel_registry.hpp"

namespace rumus {

struct SoftmaxForwardKernel {
  static constexpr std::string_view name = "softmax_forward";
  using Fn = void(Backend&, TensorArg out, TensorArg in, bool log);
};

// grad_in from grad_out and the forward output y:
// softmax: y * (g - sum(g * y)); log-softmax: g - exp(y) * sum(g).
struct SoftmaxBackwardKernel {
  static constexpr std::string_view name = "softmax_backward";
  using Fn = void(Backend&, TensorArg grad_in, TensorArg grad_out, TensorArg out, bool log);
};

}  // namespace rumus
