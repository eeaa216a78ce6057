#pragma once
// Fused in-place optimizer updates of one parameter: one kernel instead of a
// chain of elementwise passes. Never recorded on the tape.
#include "rumus/backend/backend.hpp"
#include "rumus/core/tensor.hpp"
#include "rumus/core/export.hpp"

RUMUS_API_BEGIN

namespace rumus {

// SGD with momentum/dampening/nesterov/weight decay (PyTorch's formulation).
// `momentum_buffer` is read unless options.first; ignored when momentum == 0.
void sgd_step_(Tensor& param, const Tensor& grad, Tensor& momentum_buffer, const SgdStep& options);

// Adam (options.decoupled = false) or AdamW (true); options.step counts from 1.
void adam_step_(Tensor& param, const Tensor& grad, Tensor& exp_avg, Tensor& exp_avg_sq, const AdamStep& options);

}  // namespace rumus

RUMUS_API_END
