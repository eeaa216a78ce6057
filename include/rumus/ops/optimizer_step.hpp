#pragma once
// Fused in-place optimizer updates of one parameter: one kernel instead of a
// chain of elementwise passes. Never recorded on the tape.
#include <cstdint>

#include "rumus/core/tensor.hpp"
#include "rumus/core/export.hpp"

RUMUS_API_BEGIN

namespace rumus {

// PyTorch's hyper-parameters of one update. `step` counts from 1.
struct SgdStep {
  double lr = 0, momentum = 0, dampening = 0, weight_decay = 0;
  bool nesterov = false;
  bool first = false;  // momentum buffer not yet initialised: it becomes the gradient
};
struct AdamStep {
  double lr = 0, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0;
  bool decoupled = false;  // AdamW: decay the parameter, not the gradient
  std::int64_t step = 1;
};

// SGD with momentum/dampening/nesterov/weight decay (PyTorch's formulation).
// `momentum_buffer` is read unless options.first; ignored when momentum == 0.
void sgd_step_(Tensor& param, const Tensor& grad, Tensor& momentum_buffer, const SgdStep& options);

// Adam (options.decoupled = false) or AdamW (true); options.step counts from 1.
void adam_step_(Tensor& param, const Tensor& grad, Tensor& exp_avg, Tensor& exp_avg_sq, const AdamStep& options);

}  // namespace rumus

RUMUS_API_END
