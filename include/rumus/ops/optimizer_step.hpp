#pragma once
// Fused in-place optimizer updates of one parameter: one kernel instead of a
// chain of elementwise passes. Never recorded on the tape.
#include <cstdint>
#include <span>
#include <vector>

#include "rumus/core/tensor.hpp"
#include "rumus/core/export.hpp"

RUMUS_API_BEGIN

namespace rumus {

// PyTorch's hyper-parameters of one update. `step` counts from 1.
//
// `scalars` (optional): a contiguous f32 tensor of 4 elements on the
// parameter's device holding this update's per-step values, which a device
// kernel then reads at run time: SGD (lr, first ? 1 : 0, momentum,
// dampening; a zero momentum stays zero: it takes another kernel), Adam (lr,
// 1 - beta1^step, 1 - beta2^step, step == 1 ? 1 : 0; with first set the
// moments are taken as zero, not read). A captured step (core/capture.hpp)
// replays with whatever the tensor holds at each replay; the optimizers
// keep it up to date. The other fields must hold the same values (the CPU
// reads those). A fifth element is mixed precision's found-inf flag
// (optim::GradScaler on the device): where it is not 0 the update writes
// nothing; the four values were then computed on the device, and every
// device reads them from the tensor (only the fused kernels take this form).
struct SgdStep {
  double lr = 0, momentum = 0, dampening = 0, weight_decay = 0;
  bool nesterov = false;
  bool first = false;  // momentum buffer not yet initialised: it becomes the gradient
  Tensor scalars;
};
struct AdamStep {
  double lr = 0, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0;
  bool decoupled = false;  // AdamW: decay the parameter, not the gradient
  std::int64_t step = 1;
  Tensor scalars;
};

// SGD with momentum/dampening/nesterov/weight decay (PyTorch's formulation).
// `momentum_buffer` is read unless options.first; ignored when momentum == 0.
void sgd_step_(Tensor& param, const Tensor& grad, Tensor& momentum_buffer, const SgdStep& options);

// One update of sgd_step_foreach_: sgd_step_(param, grad, momentum_buffer,
// step) (the tensors share the optimizer's storage: the update is in place).
struct SgdUpdate {
  Tensor param, grad, momentum_buffer;
  SgdStep step;
};
// Several SGD updates, as PyTorch's foreach SGD: the results of sgd_step_ on
// each, in fewer kernels where the device has a multi-tensor kernel (updates
// alike but for their scalars tensors, a few parameters per kernel).
void sgd_step_foreach_(std::span<const SgdUpdate> updates);

// Adam (options.decoupled = false) or AdamW (true); options.step counts from 1.
void adam_step_(Tensor& param, const Tensor& grad, Tensor& exp_avg, Tensor& exp_avg_sq, const AdamStep& options);

// One update of adam_step_foreach_, as SgdUpdate.
struct AdamUpdate {
  Tensor param, grad, exp_avg, exp_avg_sq;
  AdamStep step;
};
// Several Adam/AdamW updates, as PyTorch's foreach Adam: the results of
// adam_step_ on each, in fewer kernels where the device has a multi-tensor kernel.
void adam_step_foreach_(std::span<const AdamUpdate> updates);

// Mixed precision's check of one gradient before the update (PyTorch's
// _amp_foreach_non_finite_check_and_unscale_, per tensor): returns
// grad * inv_scale, and sets `found_inf`, a one-element f32 tensor on grad's
// device, to 1 if any element of the result is inf or NaN; otherwise it is
// left as it is, so that one flag gathers all gradients. One kernel where the
// device has it, a few pointwise ones elsewhere.
Tensor amp_unscale(const Tensor& grad, Tensor& found_inf, double inv_scale);
// The same with the factor in a one-element f32 tensor on grad's device (as
// PyTorch's inv_scale), read by the kernel: no host read, and a captured step
// reads the factor of each replay.
Tensor amp_unscale(const Tensor& grad, Tensor& found_inf, const Tensor& inv_scale);
// amp_unscale of several gradients into one flag, in one kernel per few
// gradients where the device has it (PyTorch's
// _amp_foreach_non_finite_check_and_unscale_). The results are new tensors,
// as amp_unscale's: gradients may share storage, and unscaling in place
// would divide a shared one twice. The gradients are on found_inf's device.
std::vector<Tensor> amp_unscale_foreach(std::span<const Tensor> grads, Tensor& found_inf, const Tensor& inv_scale);

// Mixed precision's next scale, in place on one-element f32 tensors of one
// device (PyTorch's _amp_update_scale_): where found_inf > 0, scale *=
// backoff_factor and growth_tracker restarts at 0; else growth_tracker
// counts the clean step, and when it reaches growth_interval, scale *=
// growth_factor (saturating at the largest finite f32) and the count
// restarts. One kernel. Returns scale.
Tensor& amp_update_scale_(Tensor& scale, Tensor& growth_tracker, const Tensor& found_inf, double growth_factor,
                          double backoff_factor, std::int64_t growth_interval);

}  // namespace rumus

RUMUS_API_END
