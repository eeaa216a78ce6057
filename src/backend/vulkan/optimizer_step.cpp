// Vulkan kernels of the optimizer-step family (../optimizer_step.hpp): host
// side of optim.comp, f32 on dense operands.
#include "../optimizer_step.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <vector>

#include "rumus/core/capture.hpp"
#include "rumus/core/error.hpp"
#include "push_constants.hpp"
#include "vulkan_backend.hpp"

namespace rumus::vulkan {

namespace {

using push::OptimPush;
using Operand = VulkanBackend::Operand;
constexpr std::uint32_t kLocal = 256;

bool dense_f32(TensorArg t) { return t.dtype == DType::f32 && t.layout->is_contiguous(); }
// An f32[5] scalars tensor carries the found-inf flag the update skips on.
bool skips(TensorArg scalars) { return scalars.storage != nullptr && scalars.layout->numel() == 5; }

void sgd_step(Backend& be, const SgdKernelArgs& s, TensorArg param, TensorArg grad, TensorArg buf) {
  VulkanBackend& vk = device_of(be);
  const bool momentum = s.momentum != 0;
  // ops/optimizer_step.cpp composes the update for anything else.
  if (!dense_f32(param) || !dense_f32(grad) || (momentum && !dense_f32(buf)))
    throw DeviceError("sgd_step_: the Vulkan kernel takes contiguous f32 operands");
  const bool scalars = s.scalars.storage != nullptr;
  if (!scalars) check_not_capturing("sgd_step_", "an SGD update without a scalars tensor (its lr would be frozen)");
  OptimPush pc{std::uint32_t(param.layout->numel()), std::int32_t(param.layout->offset),
               std::int32_t(grad.layout->offset), std::int32_t(momentum ? buf.layout->offset : 0), 0,
               std::int32_t(scalars ? s.scalars.layout->offset : 0),
               float(s.lr), float(s.momentum), float(s.dampening), float(s.weight_decay), 0, 0, 0, 1, 1};
  Operand ops[] = {{param, true}, {grad, false}, {momentum ? buf : param, momentum}, {param, false},
                   {scalars ? s.scalars : param, false}};
  vk.launch(ShaderId::optim,
            {kLocal, std::uint32_t(OptimizerKind::sgd), momentum, s.nesterov, !scalars && s.first, 0, scalars,
             skips(s.scalars)},
            ops,
            &pc, sizeof pc, groups_for(pc.n, kLocal));
}

// optim_foreach.comp over `count` updates, `slots` a dispatch: bind(i, used,
// out) writes update i's `per_slot` operands (a slot the dispatch does not
// use binds update 0's tensors read only, and gets no workgroups).
void launch_foreach(VulkanBackend& vk, ShaderId shader, std::vector<std::uint32_t> spec, push::OptimForeachPush pc,
                    std::size_t count, std::size_t slots, std::size_t per_slot,
                    const std::function<std::int64_t(std::size_t)>& numel,
                    const std::function<void(std::size_t, bool, Operand*)>& bind) {
  for (std::size_t begin = 0; begin < count; begin += slots) {
    const std::size_t used = std::min(slots, count - begin);
    spec[1] = std::uint32_t(used);
    std::vector<Operand> ops(slots * per_slot, Operand{});
    std::uint32_t groups = 0;
    for (std::size_t k = 0; k < slots; ++k) {
      const bool in_use = k < used;
      pc.n[k] = in_use ? std::uint32_t(numel(begin + k)) : 0u;
      pc.first[k] = in_use ? groups : UINT32_MAX;
      if (in_use) groups += std::min<std::uint32_t>(groups_for(pc.n[k], kLocal), std::uint32_t(65535 / slots));
      bind(in_use ? begin + k : begin, in_use, &ops[k * per_slot]);
    }
    vk.launch(shader, spec, ops, &pc, sizeof pc, groups);
  }
}

bool at_zero(TensorArg t) { return dense_f32(t) && t.layout->offset == 0; }
// Scalars in every update or in none, all of one size.
bool alike_scalars(TensorArg s, TensorArg first) {
  if ((s.storage != nullptr) != (first.storage != nullptr)) return false;
  return s.storage == nullptr || (at_zero(s) && skips(s) == skips(first));
}

void sgd_step_foreach(Backend& be, const SgdKernelArgs& s, std::span<const SgdOperands> updates) {
  VulkanBackend& vk = device_of(be);
  if (updates.empty()) return;
  const bool momentum = s.momentum != 0;
  const TensorArg scalars = updates[0].scalars;
  for (const SgdOperands& u : updates)
    if (!at_zero(u.param) || !at_zero(u.grad) || (momentum && !at_zero(u.momentum_buf)) ||
        !alike_scalars(u.scalars, scalars))
      throw DeviceError("sgd_step_foreach: the Vulkan kernel takes contiguous f32 operands from element 0, with "
                        "scalars in every update or in none");
  const bool on_device = scalars.storage != nullptr;
  if (!on_device) check_not_capturing("sgd_step_foreach", "an SGD update without a scalars tensor (its lr would be frozen)");
  push::OptimForeachPush pc{};
  pc.lr = float(s.lr);
  pc.momentum = float(s.momentum);
  pc.dampening = float(s.dampening);
  pc.weight_decay = float(s.weight_decay);
  launch_foreach(vk, ShaderId::optim_foreach,
                 {kLocal, 0, momentum, s.nesterov, !on_device && s.first, on_device, skips(scalars), 0}, pc,
                 updates.size(), OPTIM_FOREACH_SLOTS, 4, [&](std::size_t i) { return updates[i].param.layout->numel(); },
                 [&](std::size_t i, bool used, Operand* out) {
                   const SgdOperands& u = updates[i];
                   out[0] = {u.param, used};
                   out[1] = {u.grad, false};
                   out[2] = {momentum ? u.momentum_buf : u.param, used && momentum};
                   out[3] = {on_device ? u.scalars : u.param, false};
                 });
}

void adam_step_foreach(Backend& be, const AdamKernelArgs& s, std::span<const AdamOperands> updates) {
  VulkanBackend& vk = device_of(be);
  if (updates.empty()) return;
  const TensorArg scalars = updates[0].scalars;
  for (const AdamOperands& u : updates)
    if (!at_zero(u.param) || !at_zero(u.grad) || !at_zero(u.exp_avg) || !at_zero(u.exp_avg_sq) ||
        !alike_scalars(u.scalars, scalars))
      throw DeviceError("adam_step_foreach: the Vulkan kernel takes contiguous f32 operands from element 0, with "
                        "scalars in every update or in none");
  const bool on_device = scalars.storage != nullptr;
  if (!on_device)
    check_not_capturing("adam_step_foreach", "an Adam update without a scalars tensor (its lr and step would be frozen)");
  push::OptimForeachPush pc{};
  pc.lr = float(s.lr);
  pc.weight_decay = float(s.weight_decay);
  pc.beta1 = float(s.beta1);
  pc.beta2 = float(s.beta2);
  pc.eps = float(s.eps);
  pc.c1 = float(1.0 - std::pow(s.beta1, double(s.step)));
  pc.c2 = float(1.0 - std::pow(s.beta2, double(s.step)));
  launch_foreach(vk, ShaderId::optim_foreach_adam, {kLocal, 0, 0, 0, 0, on_device, skips(scalars), s.decoupled}, pc,
                 updates.size(), OPTIM_FOREACH_ADAM_SLOTS, 5,
                 [&](std::size_t i) { return updates[i].param.layout->numel(); },
                 [&](std::size_t i, bool used, Operand* out) {
                   const AdamOperands& u = updates[i];
                   out[0] = {u.param, used};
                   out[1] = {u.grad, false};
                   out[2] = {u.exp_avg, used};
                   out[3] = {u.exp_avg_sq, used};
                   out[4] = {on_device ? u.scalars : u.param, false};
                 });
}

void adam_step(Backend& be, const AdamKernelArgs& s, TensorArg param, TensorArg grad, TensorArg m, TensorArg v) {
  VulkanBackend& vk = device_of(be);
  if (!dense_f32(param) || !dense_f32(grad) || !dense_f32(m) || !dense_f32(v))
    throw DeviceError("adam_step_: the Vulkan kernel takes contiguous f32 operands");
  const bool scalars = s.scalars.storage != nullptr;
  if (!scalars) check_not_capturing("adam_step_", "an Adam update without a scalars tensor (its lr and step would be frozen)");
  OptimPush pc{std::uint32_t(param.layout->numel()), std::int32_t(param.layout->offset),
               std::int32_t(grad.layout->offset), std::int32_t(m.layout->offset), std::int32_t(v.layout->offset),
               std::int32_t(scalars ? s.scalars.layout->offset : 0), float(s.lr), 0, 0, float(s.weight_decay), float(s.beta1), float(s.beta2), float(s.eps),
               float(1.0 - std::pow(s.beta1, double(s.step))), float(1.0 - std::pow(s.beta2, double(s.step)))};
  Operand ops[] = {{param, true}, {grad, false}, {m, true}, {v, true}, {scalars ? s.scalars : param, false}};
  vk.launch(ShaderId::optim,
            {kLocal, std::uint32_t(OptimizerKind::adam), 0, 0, 0, s.decoupled, scalars, skips(s.scalars)}, ops, &pc,
            sizeof pc, groups_for(pc.n, kLocal));
}

void amp_unscale(Backend& be, TensorArg out, TensorArg grad, TensorArg found_inf, TensorArg inv_scale_t,
                 double inv_scale) {
  VulkanBackend& vk = device_of(be);
  const bool on_device = inv_scale_t.storage != nullptr;
  if (!dense_f32(out) || !dense_f32(grad) || !dense_f32(found_inf) || (on_device && !dense_f32(inv_scale_t)))
    throw Error("amp_unscale: the Vulkan kernel needs dense f32 tensors");
  OptimPush pc{std::uint32_t(grad.layout->numel()), std::int32_t(out.layout->offset), std::int32_t(grad.layout->offset),
               std::int32_t(found_inf.layout->offset), 0, std::int32_t(on_device ? inv_scale_t.layout->offset : 0),
               float(inv_scale), 0, 0, 0, 0, 0, 0, 1, 1};
  Operand ops[] = {{out, true}, {grad, false}, {found_inf, true}, {out, false}, {on_device ? inv_scale_t : out, false}};
  vk.launch(ShaderId::optim, {kLocal, std::uint32_t(OptimizerKind::unscale), 0, 0, 0, 0, on_device, 0}, ops, &pc,
            sizeof pc, groups_for(pc.n, kLocal));
}

void amp_unscale_foreach(Backend& be, std::span<const AmpUnscaleOperands> grads, TensorArg found_inf,
                         TensorArg inv_scale) {
  VulkanBackend& vk = device_of(be);
  if (grads.empty()) return;
  for (const AmpUnscaleOperands& u : grads)
    if (!at_zero(u.out) || !at_zero(u.grad))
      throw DeviceError("amp_unscale_foreach: the Vulkan kernel takes contiguous f32 gradients from element 0");
  if (!at_zero(found_inf) || !at_zero(inv_scale))
    throw DeviceError("amp_unscale_foreach: the Vulkan kernel takes found_inf and inv_scale at element 0");
  launch_foreach(vk, ShaderId::optim_foreach_unscale, {kLocal, 0, 0, 0, 0, 0, 0, 0}, push::OptimForeachPush{},
                 grads.size(), OPTIM_FOREACH_SLOTS, 4, [&](std::size_t i) { return grads[i].grad.layout->numel(); },
                 [&](std::size_t i, bool used, Operand* out) {
                   out[0] = {grads[i].out, used};
                   out[1] = {grads[i].grad, false};
                   out[2] = {found_inf, used};
                   out[3] = {inv_scale, false};
                 });
}

void amp_update_scale(Backend& be, TensorArg scale, TensorArg growth_tracker, TensorArg found_inf,
                      double growth_factor, double backoff_factor, std::int64_t growth_interval) {
  VulkanBackend& vk = device_of(be);
  if (!dense_f32(scale) || !dense_f32(growth_tracker) || !dense_f32(found_inf))
    throw Error("amp_update_scale: the Vulkan kernel needs dense f32 tensors");
  OptimPush pc{1, std::int32_t(scale.layout->offset), std::int32_t(found_inf.layout->offset),
               std::int32_t(growth_tracker.layout->offset), 0, 0, float(growth_factor), float(backoff_factor),
               float(growth_interval), 0, 0, 0, 0, 1, 1};
  Operand ops[] = {{scale, true}, {found_inf, false}, {growth_tracker, true}, {scale, false}, {scale, false}};
  vk.launch(ShaderId::optim, {1, std::uint32_t(OptimizerKind::update_scale), 0, 0, 0, 0, 0, 0}, ops, &pc, sizeof pc, 1);
}

}  // namespace
}  // namespace rumus::vulkan

namespace rumus {

RUMUS_KERNEL_FAMILY(vulkan, optimizer_step) {
  register_kernel<SgdStepKernel>(Device::Kind::vulkan, DTypeSet{DType::f32}, &vulkan::sgd_step);
  register_kernel<SgdForeachKernel>(Device::Kind::vulkan, DTypeSet{DType::f32}, &vulkan::sgd_step_foreach);
  register_kernel<AdamForeachKernel>(Device::Kind::vulkan, DTypeSet{DType::f32}, &vulkan::adam_step_foreach);
  register_kernel<AdamStepKernel>(Device::Kind::vulkan, DTypeSet{DType::f32}, &vulkan::adam_step);
  register_kernel<AmpUnscaleKernel>(Device::Kind::vulkan, DTypeSet{DType::f32}, &vulkan::amp_unscale);
  register_kernel<AmpUnscaleForeachKernel>(Device::Kind::vulkan, DTypeSet{DType::f32}, &vulkan::amp_unscale_foreach);
  register_kernel<AmpUpdateScaleKernel>(Device::Kind::vulkan, DTypeSet{DType::f32}, &vulkan::amp_update_scale);
}

}  // namespace rumus
