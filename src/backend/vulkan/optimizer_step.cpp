// Vulkan kernels of the optimizer-step family (../optimizer_step.hpp): host
// side of optim.comp, f32 on dense operands.
#include "../optimizer_step.hpp"

#include <fmt/format.h>

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

// Up to kSlots updates a dispatch (optim_foreach.comp); a slot the call does
// not use binds slot 0's tensors, read only, and gets no workgroups.
void sgd_step_foreach(Backend& be, const SgdKernelArgs& s, std::span<const SgdOperands> updates) {
  constexpr std::size_t kSlots = OPTIM_FOREACH_SLOTS;
  VulkanBackend& vk = device_of(be);
  if (updates.empty()) return;
  const bool momentum = s.momentum != 0;
  const bool scalars = updates[0].scalars.storage != nullptr;
  const bool skip = skips(updates[0].scalars);
  auto at_zero = [](TensorArg t) { return dense_f32(t) && t.layout->offset == 0; };
  for (const SgdOperands& u : updates)
    if (!at_zero(u.param) || !at_zero(u.grad) || (momentum && !at_zero(u.momentum_buf)) ||
        (u.scalars.storage != nullptr) != scalars || (scalars && (!at_zero(u.scalars) || skips(u.scalars) != skip)))
      throw DeviceError("sgd_step_foreach: the Vulkan kernel takes contiguous f32 operands from element 0, with "
                        "scalars in every update or in none");
  if (!scalars) check_not_capturing("sgd_step_foreach", "an SGD update without a scalars tensor (its lr would be frozen)");
  for (std::size_t begin = 0; begin < updates.size(); begin += kSlots) {
    const std::span<const SgdOperands> chunk = updates.subspan(begin, std::min(kSlots, updates.size() - begin));
    push::OptimForeachPush pc{};
    pc.lr = float(s.lr);
    pc.momentum = float(s.momentum);
    pc.dampening = float(s.dampening);
    pc.weight_decay = float(s.weight_decay);
    Operand ops[4 * kSlots];
    std::uint32_t groups = 0;
    for (std::size_t k = 0; k < kSlots; ++k) {
      const SgdOperands& u = chunk[k < chunk.size() ? k : 0];
      const bool used = k < chunk.size();
      pc.n[k] = used ? std::uint32_t(u.param.layout->numel()) : 0u;
      pc.first[k] = used ? groups : UINT32_MAX;
      if (used) groups += std::min<std::uint32_t>(groups_for(pc.n[k], kLocal), 65535 / kSlots);
      ops[4 * k] = {u.param, used};
      ops[4 * k + 1] = {u.grad, false};
      ops[4 * k + 2] = {momentum ? u.momentum_buf : u.param, used && momentum};
      ops[4 * k + 3] = {scalars ? u.scalars : u.param, false};
    }
    vk.launch(ShaderId::optim_foreach,
              {kLocal, std::uint32_t(chunk.size()), momentum, s.nesterov, !scalars && s.first, scalars, skip}, ops,
              &pc, sizeof pc, groups);
  }
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

}  // namespace
}  // namespace rumus::vulkan

namespace rumus {

RUMUS_KERNEL_FAMILY(vulkan, optimizer_step) {
  register_kernel<SgdStepKernel>(Device::Kind::vulkan, DTypeSet{DType::f32}, &vulkan::sgd_step);
  register_kernel<SgdForeachKernel>(Device::Kind::vulkan, DTypeSet{DType::f32}, &vulkan::sgd_step_foreach);
  register_kernel<AdamStepKernel>(Device::Kind::vulkan, DTypeSet{DType::f32}, &vulkan::adam_step);
  register_kernel<AmpUnscaleKernel>(Device::Kind::vulkan, DTypeSet{DType::f32}, &vulkan::amp_unscale);
}

}  // namespace rumus
