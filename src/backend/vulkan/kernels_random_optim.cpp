// Host side of random.comp (Philox, same stream as the CPU) and optim.comp.
#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "rumus/core/capture.hpp"
#include "rumus/core/error.hpp"
#include "push_constants.hpp"
#include "vulkan_backend.hpp"

namespace rumus::vulkan {

namespace {

using push::OptimPush;
using push::RandomPush;
constexpr std::uint32_t kLocal = 256;

bool dense_f32(TensorArg t) { return t.dtype == DType::f32 && t.layout->is_contiguous(); }

// Draw k (24 bits) gives 1 when k / 2^24 < p, i.e. k < ceil(p * 2^24): the CPU's test, exactly.
std::uint32_t bernoulli_threshold(double p) {
  return std::uint32_t(std::clamp(std::ceil(p * 16777216.0), 0.0, 16777216.0));
}
}  // namespace

void VulkanBackend::random(RandomKind kind, TensorArg out, std::uint64_t seed, std::uint64_t offset, double a,
                           double b, TensorArg state) {
  if (!out.layout->is_contiguous()) throw Error("random: the Vulkan kernel needs a contiguous output");
  const std::int64_t n = out.layout->numel();
  if (n == 0) return;
  RandomPush pc{std::uint32_t(n), std::uint32_t(out.layout->offset), std::uint32_t(seed), std::uint32_t(seed >> 32),
                std::uint32_t(offset), std::uint32_t(offset >> 32), float(a), float(b), 0, 0, 0, 0, 0, 0, 0, 0};
  push::split_double(a, pc.a_lo, pc.a_hi);
  push::split_double(b, pc.b_lo, pc.b_hi);
  if (kind == RandomKind::bernoulli) {
    pc.range_lo = bernoulli_threshold(a);
  } else if (kind == RandomKind::randint) {
    std::uint64_t range = std::uint64_t(b - a);
    std::int64_t low = std::int64_t(a);
    pc.range_lo = std::uint32_t(range);
    pc.range_hi = std::uint32_t(range >> 32);
    pc.low_lo = std::int32_t(std::uint32_t(std::uint64_t(low)));
    pc.low_hi = std::int32_t(std::uint32_t(std::uint64_t(low) >> 32));
  }
  const bool from_state = state.storage != nullptr;
  Operand ops[] = {{out, true}, {from_state ? state : out, false}};
  // bernoulli: an invocation sets 4 elements (one draw's four words).
  launch(shader_for("random", out.dtype), {kLocal, std::uint32_t(kind), std::uint32_t(out.dtype), from_state}, ops, &pc, sizeof pc,
         groups_for(kind == RandomKind::bernoulli ? (n + 3) / 4 : n, kLocal));
}

void VulkanBackend::dropout_forward(TensorArg out, TensorArg mask, TensorArg in, std::uint64_t seed,
                                    std::uint64_t offset, double keep, double scale) {
  for (TensorArg t : {out, mask, in})
    if (!t.layout->is_contiguous() || t.dtype != in.dtype)
      throw Error(fmt::format("dropout_forward: the Vulkan kernel needs contiguous operands of one dtype, got {} {} "
                              "from {} {}", dtype_name(out.dtype), out.layout->is_contiguous() ? "contiguous" : "strided",
                              dtype_name(in.dtype), in.layout->is_contiguous() ? "contiguous" : "strided"));
  const std::int64_t n = in.layout->numel();
  if (n == 0) return;
  RandomPush pc{std::uint32_t(n), std::uint32_t(mask.layout->offset), std::uint32_t(seed), std::uint32_t(seed >> 32),
                std::uint32_t(offset), std::uint32_t(offset >> 32), float(keep), float(scale), bernoulli_threshold(keep),
                0, 0, 0, 0, 0, 0, 0, std::uint32_t(in.layout->offset), std::uint32_t(out.layout->offset)};
  push::split_double(keep, pc.a_lo, pc.a_hi);
  push::split_double(scale, pc.b_lo, pc.b_hi);
  Operand ops[] = {{mask, true}, {in, false}, {in, false}, {out, true}};
  launch(shader_for("random", in.dtype), {kLocal, std::uint32_t(RandomKind::bernoulli), std::uint32_t(in.dtype), 0, 1},
         ops, &pc, sizeof pc, groups_for((n + 3) / 4, kLocal));
}

void VulkanBackend::sgd_step(const SgdKernelArgs& s, TensorArg param, TensorArg grad, TensorArg buf) {
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
  launch("optim", {kLocal, std::uint32_t(OptimizerKind::sgd), momentum, s.nesterov, !scalars && s.first, 0, scalars}, ops, &pc,
         sizeof pc, groups_for(pc.n, kLocal));
}

void VulkanBackend::adam_step(const AdamKernelArgs& s, TensorArg param, TensorArg grad, TensorArg m, TensorArg v) {
  if (!dense_f32(param) || !dense_f32(grad) || !dense_f32(m) || !dense_f32(v))
    throw DeviceError("adam_step_: the Vulkan kernel takes contiguous f32 operands");
  const bool scalars = s.scalars.storage != nullptr;
  if (!scalars) check_not_capturing("adam_step_", "an Adam update without a scalars tensor (its lr and step would be frozen)");
  OptimPush pc{std::uint32_t(param.layout->numel()), std::int32_t(param.layout->offset),
               std::int32_t(grad.layout->offset), std::int32_t(m.layout->offset), std::int32_t(v.layout->offset),
               std::int32_t(scalars ? s.scalars.layout->offset : 0), float(s.lr), 0, 0, float(s.weight_decay), float(s.beta1), float(s.beta2), float(s.eps),
               float(1.0 - std::pow(s.beta1, double(s.step))), float(1.0 - std::pow(s.beta2, double(s.step)))};
  Operand ops[] = {{param, true}, {grad, false}, {m, true}, {v, true}, {scalars ? s.scalars : param, false}};
  launch("optim", {kLocal, std::uint32_t(OptimizerKind::adam), 0, 0, 0, s.decoupled, scalars}, ops, &pc, sizeof pc,
         groups_for(pc.n, kLocal));
}

void VulkanBackend::amp_unscale(TensorArg out, TensorArg grad, TensorArg found_inf, double inv_scale) {
  if (!dense_f32(out) || !dense_f32(grad) || !dense_f32(found_inf))
    throw Error("amp_unscale: the Vulkan kernel needs dense f32 tensors");
  OptimPush pc{std::uint32_t(grad.layout->numel()), std::int32_t(out.layout->offset), std::int32_t(grad.layout->offset),
               std::int32_t(found_inf.layout->offset), 0, 0, float(inv_scale), 0, 0, 0, 0, 0, 0, 1, 1};
  Operand ops[] = {{out, true}, {grad, false}, {found_inf, true}, {out, false}, {out, false}};
  launch("optim", {kLocal, std::uint32_t(OptimizerKind::unscale), 0, 0, 0, 0, 0}, ops, &pc, sizeof pc,
         groups_for(pc.n, kLocal));
}

}  // namespace rumus::vulkan
