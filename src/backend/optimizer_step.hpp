#pragma once
// The optimizer-step family: fused updates, elementwise over one parameter
// (all operands share its shape and are dense), the kernels of
// src/ops/optimizer_step.cpp, which composes them from ops where a device
// has none.
#include <span>

#include "kernel_registry.hpp"

namespace rumus {

// `step` counts from 1. `scalars`, when its storage is not null, is a dense
// f32[4] on the device holding the per-step values (SGD: lr, first, momentum,
// dampening; Adam: lr, 1 - beta1^step, 1 - beta2^step, first) that a device may read at run time
// instead of the fields, so a captured step replays with the values of each
// replay. The fields hold the same values. An f32[5] adds mixed precision's
// found-inf flag: where it is not 0 the kernel writes nothing. Its values
// were computed on the device and the fields do not hold them: every device
// reads them from the tensor.
struct SgdKernelArgs {
  double lr = 0, momentum = 0, dampening = 0, weight_decay = 0;
  bool nesterov = false;
  bool first = false;  // momentum buffer not yet initialised: it becomes the gradient
  TensorArg scalars{nullptr, DType::f32, nullptr};
};
struct AdamKernelArgs {
  double lr = 0, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0;
  bool decoupled = false;  // AdamW: decay the parameter, not the gradient
  std::int64_t step = 1;
  TensorArg scalars{nullptr, DType::f32, nullptr};
};

// param -= lr * update, with momentum_buf (ignored when momentum == 0) updated in place.
struct SgdStepKernel {
  static constexpr std::string_view name = "sgd_step";
  using Fn = void(Backend&, const SgdKernelArgs& s, TensorArg param, TensorArg grad, TensorArg momentum_buf);
};

// One SGD update of SgdForeachKernel: dense f32 operands that each start at
// element 0 of their storage; `scalars` as SgdKernelArgs::scalars (null or
// not, with 4 or 5 elements, alike in every update of one call).
struct SgdOperands {
  TensorArg param, grad, momentum_buf, scalars;
};
// Several SGD updates with the same hyper-parameters (`s`, whose scalars are
// unused) in a few kernels: PyTorch's foreach SGD.
struct SgdForeachKernel {
  static constexpr std::string_view name = "sgd_step_foreach";
  using Fn = void(Backend&, const SgdKernelArgs& s, std::span<const SgdOperands> updates);
};

// One Adam update of AdamForeachKernel, as SgdOperands.
struct AdamOperands {
  TensorArg param, grad, exp_avg, exp_avg_sq, scalars;
};
// Several Adam/AdamW updates with the same hyper-parameters and step (`s`,
// whose scalars are unused) in a few kernels: PyTorch's foreach Adam.
struct AdamForeachKernel {
  static constexpr std::string_view name = "adam_step_foreach";
  using Fn = void(Backend&, const AdamKernelArgs& s, std::span<const AdamOperands> updates);
};

// Adam/AdamW with bias correction; m and v updated in place.
struct AdamStepKernel {
  static constexpr std::string_view name = "adam_step";
  using Fn = void(Backend&, const AdamKernelArgs& s, TensorArg param, TensorArg grad, TensorArg m, TensorArg v);
};

// out = grad * inv_scale over dense tensors of one dtype; found_inf (one f32)
// becomes 1 if any product is inf or NaN, and is otherwise left as it is.
// Mixed precision's gradient check in one pass. `inv_scale_t`, when its
// storage is not null, is a one-element f32 on the device read at run time
// instead of `inv_scale` (the scaler's scale lives there: no host read, and
// a captured step reads the scale of each replay).
struct AmpUnscaleKernel {
  static constexpr std::string_view name = "amp_unscale";
  using Fn = void(Backend&, TensorArg out, TensorArg grad, TensorArg found_inf, TensorArg inv_scale_t,
                  double inv_scale);
};

// One gradient of AmpUnscaleForeachKernel: out = grad * inv_scale, dense
// tensors of one shape and dtype.
struct AmpUnscaleOperands {
  TensorArg out, grad;
};
// AmpUnscaleKernel over several gradients of one dtype in a few kernels, all
// into one flag, the factor in `inv_scale` (a one-element f32 on the device):
// PyTorch's _amp_foreach_non_finite_check_and_unscale_.
struct AmpUnscaleForeachKernel {
  static constexpr std::string_view name = "amp_unscale_foreach";
  using Fn = void(Backend&, std::span<const AmpUnscaleOperands> grads, TensorArg found_inf, TensorArg inv_scale);
};

// Mixed precision's next scale, in place on one-element f32 tensors (PyTorch's
// _amp_update_scale_): where found_inf > 0 the scale backs off and the growth
// count restarts; else the count grows, and at growth_interval the scale grows
// (saturating at the largest finite f32) and the count restarts.
struct AmpUpdateScaleKernel {
  static constexpr std::string_view name = "amp_update_scale";
  using Fn = void(Backend&, TensorArg scale, TensorArg growth_tracker, TensorArg found_inf, double growth_factor,
                  double backoff_factor, std::int64_t growth_interval);
};

}  // namespace rumus
