#include "rumus/ops/optimizer_step.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "op_util.hpp"
#include "../backend/optimizer_step.hpp"
#include "rumus/autograd/grad_mode.hpp"
#include "rumus/core/capture.hpp"
#include "rumus/ops/compare.hpp"
#include "rumus/ops/elementwise.hpp"
#include "rumus/ops/reduction.hpp"

namespace rumus {

using detail::arg;

namespace {
void check_state(const char* op, const Tensor& param, const Tensor& other, const char* what) {
  detail::check_same_device(op, param, other);
  if (other.shape() != param.shape())
    throw ShapeError(fmt::format("{}: {} shape {} differs from parameter shape {}", op, what,
                                 shape_str(other.shape()), shape_str(param.shape())));
  if (other.dtype() != param.dtype())
    throw DTypeError(fmt::format("{}: {} dtype {} differs from parameter dtype {}", op, what,
                                 dtype_name(other.dtype()), dtype_name(param.dtype())));
}
void check_scalars(const char* op, const Tensor& param, const Tensor& s) {
  if (!s.defined()) return;
  detail::check_same_device(op, param, s);
  if (s.dtype() != DType::f32 || (s.numel() != 4 && s.numel() != 5) || !s.is_contiguous())
    throw ShapeError(fmt::format("{}: expected scalars to be a contiguous f32 tensor of 4 or 5 elements, got {} {}",
                                 op, dtype_name(s.dtype()), shape_str(s.shape())));
}
// The composed updates read the fields, which do not hold values computed on
// the device, and cannot skip without a host read.
void check_composable(const char* op, const Tensor& s) {
  if (s.defined() && s.numel() == 5)
    throw DeviceError(fmt::format("{}: a step skipped on the device (scalars with a found-inf flag) needs the fused "
                                  "kernel: a contiguous parameter of a dtype the device's kernel takes",
                                  op));
}
TensorArg scalars_arg(const Tensor& s) { return s.defined() ? arg(s) : TensorArg{nullptr, DType::f32, nullptr}; }
// Gradients may arrive as broadcast or strided views; the fused kernels read them densely.
Tensor dense(const Tensor& t) { return t.detach().contiguous(); }

// The fused update runs where the device has the kernel for the parameter's
// dtype and every operand is contiguous. Elsewhere (a strided parameter, f16
// on the CPU, f64 on Vulkan) the update is composed of ops on the same device.
// Inside a device's capture that is refused: the composed ops would bake in
// this step's learning rate, which the fused kernels read at each replay.
template <class K>
bool fused(const char* op, const Tensor& param, std::initializer_list<const Tensor*> state,
           const char* frozen) {
  bool dense_operands = param.is_contiguous();
  for (const Tensor* t : state) dense_operands = dense_operands && t->is_contiguous();
  Backend& be = backend(param.device());
  if (dense_operands && supports<K>(be, param.dtype())) return true;
  if (is_capturing() && be.can_capture()) check_not_capturing(op, frozen);
  return false;
}

void composed_sgd_step(Tensor& param, const Tensor& grad, Tensor& buf, const SgdStep& o) {
  NoGradGuard no_grad;
  Tensor g = o.weight_decay != 0 ? add(grad, param, o.weight_decay) : grad;
  if (o.momentum != 0) {
    if (o.first) buf.copy_(g);
    else buf.mul_(o.momentum).add_(g, 1.0 - o.dampening);
    g = o.nesterov ? add(g, buf, o.momentum) : buf;
  }
  param.add_(g, -o.lr);
}

void composed_adam_step(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, const AdamStep& o) {
  NoGradGuard no_grad;
  const bool l2 = o.weight_decay != 0 && !o.decoupled;
  Tensor g = l2 ? add(grad, param, o.weight_decay) : grad;
  if (o.weight_decay != 0 && o.decoupled) param.mul_(1.0 - o.lr * o.weight_decay);
  m.mul_(o.beta1).add_(g, 1.0 - o.beta1);
  v.mul_(o.beta2).add_(square(g), 1.0 - o.beta2);
  const double c1 = 1.0 - std::pow(o.beta1, double(o.step)), c2 = 1.0 - std::pow(o.beta2, double(o.step));
  // param -= lr / c1 * m / (sqrt(v / c2) + eps)
  param.add_(div(m, add(sqrt(mul(v, 1.0 / c2)), o.eps)), -o.lr / c1);
}
}  // namespace

void sgd_step_(Tensor& param, const Tensor& grad, Tensor& buf, const SgdStep& o) {
  detail::check_floating("sgd_step_", param);
  check_state("sgd_step_", param, grad, "gradient");
  const bool uses_buffer = o.momentum != 0;
  if (uses_buffer) check_state("sgd_step_", param, buf, "momentum buffer");
  check_scalars("sgd_step_", param, o.scalars);
  Tensor g = dense(grad);
  if (!fused<SgdStepKernel>("sgd_step_", param, {uses_buffer ? &buf : &param},
             "an SGD update of a parameter the fused kernel does not take (its lr would be frozen)")) {
    check_composable("sgd_step_", o.scalars);
    composed_sgd_step(param, g, buf, o);
    return;
  }
  Tensor b = uses_buffer ? buf : param;  // a placeholder operand when there is no momentum
  detail::kernel<SgdStepKernel>("sgd_step_", param)(
      SgdKernelArgs{o.lr, o.momentum, o.dampening, o.weight_decay, o.nesterov, o.first, scalars_arg(o.scalars)},
      arg(param), arg(g), arg(b));
  param.storage().bump_version();
  if (uses_buffer) buf.storage().bump_version();
}

namespace {
// Whether a foreach op may give an update to its multi-tensor kernel K: the
// operands it takes (dense f32 on the parameter's device, each from element
// 0 of its storage, scalars of 4 or 5 elements); others run one by one, which
// also raises their errors.
template <class K>
bool foreach_takes(const Tensor& param, std::initializer_list<const Tensor*> state, const Tensor& scalars) {
  auto at_zero = [&](const Tensor& t) {
    return t.defined() && t.device() == param.device() && t.dtype() == DType::f32 && t.shape() == param.shape() &&
           t.is_contiguous() && t.offset() == 0;
  };
  bool takes = at_zero(param);
  for (const Tensor* t : state) takes = takes && at_zero(*t);
  const Tensor& s = scalars;
  return takes &&
         (!s.defined() || (s.device() == param.device() && s.dtype() == DType::f32 && s.is_contiguous() &&
                           s.offset() == 0 && (s.numel() == 4 || s.numel() == 5))) &&
         supports<K>(backend(param.device()), DType::f32);
}
bool alike_scalars(const Tensor& a, const Tensor& b) {
  return a.defined() == b.defined() && (!a.defined() || a.numel() == b.numel());
}
bool alike(const SgdUpdate& a, const SgdUpdate& b) {
  const SgdStep &x = a.step, &y = b.step;
  return a.param.device() == b.param.device() && x.lr == y.lr && x.momentum == y.momentum &&
         x.dampening == y.dampening && x.weight_decay == y.weight_decay && x.nesterov == y.nesterov &&
         x.first == y.first && alike_scalars(x.scalars, y.scalars);
}
bool alike(const AdamUpdate& a, const AdamUpdate& b) {
  const AdamStep &x = a.step, &y = b.step;
  return a.param.device() == b.param.device() && x.lr == y.lr && x.beta1 == y.beta1 && x.beta2 == y.beta2 &&
         x.eps == y.eps && x.weight_decay == y.weight_decay && x.decoupled == y.decoupled && x.step == y.step &&
         alike_scalars(x.scalars, y.scalars);
}
// The updates `takes` accepts, in kinds of alike() ones (first-seen order);
// the others go to `one` right away.
template <class U, class Takes, class One>
std::vector<std::vector<const U*>> sort_updates(std::span<const U> updates, Takes takes, One one) {
  std::vector<std::vector<const U*>> kinds;
  for (const U& u : updates) {
    if (!takes(u)) {
      one(u);
      continue;
    }
    auto kind = std::find_if(kinds.begin(), kinds.end(), [&](const auto& k) { return alike(*k[0], u); });
    if (kind == kinds.end()) kind = kinds.insert(kinds.end(), std::vector<const U*>{});
    kind->push_back(&u);
  }
  return kinds;
}
}  // namespace

void sgd_step_foreach_(std::span<const SgdUpdate> updates) {
  const auto kinds = sort_updates(
      updates,
      [](const SgdUpdate& u) {
        const bool buffered = u.step.momentum != 0;
        return foreach_takes<SgdForeachKernel>(u.param, {&u.grad, buffered ? &u.momentum_buffer : &u.param},
                                               u.step.scalars);
      },
      [](const SgdUpdate& u) {
        Tensor param = u.param, buf = u.momentum_buffer;
        sgd_step_(param, u.grad, buf, u.step);
      });
  for (const auto& kind : kinds) {
    const SgdStep& o = kind[0]->step;
    const bool uses_buffer = o.momentum != 0;
    std::vector<SgdOperands> operands;
    for (const SgdUpdate* u : kind)
      operands.push_back({arg(u->param), arg(u->grad), uses_buffer ? arg(u->momentum_buffer) : arg(u->param),
                          scalars_arg(u->step.scalars)});
    detail::kernel<SgdForeachKernel>("sgd_step_foreach_", kind[0]->param)(
        SgdKernelArgs{o.lr, o.momentum, o.dampening, o.weight_decay, o.nesterov, o.first, {nullptr, DType::f32, nullptr}},
        std::span<const SgdOperands>(operands));
    for (const SgdUpdate* u : kind) {
      u->param.storage().bump_version();
      if (uses_buffer) u->momentum_buffer.storage().bump_version();
    }
  }
}

void adam_step_foreach_(std::span<const AdamUpdate> updates) {
  const auto kinds = sort_updates(
      updates,
      [](const AdamUpdate& u) {
        return u.step.step >= 1 &&
               foreach_takes<AdamForeachKernel>(u.param, {&u.grad, &u.exp_avg, &u.exp_avg_sq}, u.step.scalars);
      },
      [](const AdamUpdate& u) {
        Tensor param = u.param, m = u.exp_avg, v = u.exp_avg_sq;
        adam_step_(param, u.grad, m, v, u.step);
      });
  for (const auto& kind : kinds) {
    const AdamStep& o = kind[0]->step;
    std::vector<AdamOperands> operands;
    for (const AdamUpdate* u : kind)
      operands.push_back({arg(u->param), arg(u->grad), arg(u->exp_avg), arg(u->exp_avg_sq), scalars_arg(u->step.scalars)});
    detail::kernel<AdamForeachKernel>("adam_step_foreach_", kind[0]->param)(
        AdamKernelArgs{o.lr, o.beta1, o.beta2, o.eps, o.weight_decay, o.decoupled, o.step, {nullptr, DType::f32, nullptr}},
        std::span<const AdamOperands>(operands));
    for (const AdamUpdate* u : kind)
      for (const Tensor* t : {&u->param, &u->exp_avg, &u->exp_avg_sq}) t->storage().bump_version();
  }
}

void adam_step_(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, const AdamStep& o) {
  detail::check_floating("adam_step_", param);
  check_state("adam_step_", param, grad, "gradient");
  check_state("adam_step_", param, m, "exp_avg");
  check_state("adam_step_", param, v, "exp_avg_sq");
  if (o.step < 1) throw Error(fmt::format("adam_step_: expected step >= 1, got {}", o.step));
  check_scalars("adam_step_", param, o.scalars);
  Tensor g = dense(grad);
  if (!fused<AdamStepKernel>("adam_step_", param, {&m, &v},
             "an Adam update of a parameter the fused kernel does not take (its lr and step would be frozen)")) {
    check_composable("adam_step_", o.scalars);
    composed_adam_step(param, g, m, v, o);
    return;
  }
  detail::kernel<AdamStepKernel>("adam_step_", param)(
      AdamKernelArgs{o.lr, o.beta1, o.beta2, o.eps, o.weight_decay, o.decoupled, o.step, scalars_arg(o.scalars)},
      arg(param), arg(g), arg(m), arg(v));
  for (Tensor* t : {&param, &m, &v}) t->storage().bump_version();
}

namespace {
Tensor unscale(const Tensor& grad, Tensor& found_inf, const Tensor& inv_t, double inv_scale) {
  detail::check_floating("amp_unscale", grad);
  detail::check_same_device("amp_unscale", grad, found_inf);
  if (found_inf.dtype() != DType::f32 || found_inf.numel() != 1)
    throw ShapeError(fmt::format("amp_unscale: expected found_inf to be a one-element f32 tensor, got {} {}",
                                 dtype_name(found_inf.dtype()), shape_str(found_inf.shape())));
  if (inv_t.defined()) {
    detail::check_same_device("amp_unscale", grad, inv_t);
    if (inv_t.dtype() != DType::f32 || inv_t.numel() != 1)
      throw ShapeError(fmt::format("amp_unscale: expected inv_scale to be a one-element f32 tensor, got {} {}",
                                   dtype_name(inv_t.dtype()), shape_str(inv_t.shape())));
  } else if (!std::isfinite(inv_scale)) {
    throw ValueError(fmt::format("amp_unscale: expected a finite inv_scale, got {}", inv_scale));
  }
  NoGradGuard no_grad;
  const Tensor g = dense(grad);
  if (detail::has_kernels<AmpUnscaleKernel>(g)) {
    Tensor out = detail::alloc(g.shape(), g.dtype(), g.device());
    if (out.numel() > 0) {
      const Tensor inv = inv_t.defined() ? inv_t.detach().contiguous() : Tensor();
      detail::kernel<AmpUnscaleKernel>("amp_unscale", g)(arg(out), arg(g), arg(found_inf), scalars_arg(inv),
                                                         inv_scale);
      found_inf.storage().bump_version();
    }
    return out;
  }
  // Composed: the product, then whether any of it is not finite, folded into the flag.
  Tensor out = inv_t.defined() ? mul(g, inv_t.reshape({}).to(g.dtype())) : mul(g, inv_scale);
  if (out.numel() > 0) {
    const Tensor bad = gt(sum(eq(isfinite(out), 0.0).to(DType::f32)), 0.0).to(DType::f32);
    found_inf.copy_(maximum(found_inf, bad.reshape(found_inf.shape())));
  }
  return out;
}
}  // namespace

Tensor amp_unscale(const Tensor& grad, Tensor& found_inf, double inv_scale) {
  return unscale(grad, found_inf, Tensor(), inv_scale);
}

Tensor amp_unscale(const Tensor& grad, Tensor& found_inf, const Tensor& inv_scale) {
  if (!inv_scale.defined()) throw ValueError("amp_unscale: expected a defined inv_scale tensor");
  return unscale(grad, found_inf, inv_scale, 1.0);
}

namespace {
void check_one_f32(const char* op, const char* what, const Tensor& t) {
  if (!t.defined()) throw ValueError(fmt::format("{}: expected a defined {} tensor", op, what));
  if (t.dtype() != DType::f32 || t.numel() != 1)
    throw ShapeError(fmt::format("{}: expected {} to be a one-element f32 tensor, got {} {}", op, what,
                                 dtype_name(t.dtype()), shape_str(t.shape())));
}
// The multi-tensor kernels read their operands from element 0.
Tensor from_zero(const Tensor& t) {
  Tensor d = dense(t);
  return d.offset() == 0 ? d : d.clone();
}
}  // namespace

std::vector<Tensor> amp_unscale_foreach(std::span<const Tensor> grads, Tensor& found_inf, const Tensor& inv_scale) {
  constexpr const char* op = "amp_unscale_foreach";
  check_one_f32(op, "found_inf", found_inf);
  check_one_f32(op, "inv_scale", inv_scale);
  detail::check_same_device(op, found_inf, inv_scale);
  for (std::size_t i = 0; i < grads.size(); ++i) {
    if (!grads[i].defined()) throw ValueError(fmt::format("{}: gradient {} is undefined", op, i));
    detail::check_floating(op, grads[i]);
    if (grads[i].device() != found_inf.device())
      throw DeviceError(fmt::format("{}: gradient {} is on {} but found_inf is on {}", op, i,
                                    grads[i].device().str(), found_inf.device().str()));
  }
  NoGradGuard no_grad;
  std::vector<Tensor> out(grads.size());
  // One kernel call per dtype the device's kernel takes; amp_unscale for the rest.
  const bool foreach_flag = found_inf.is_contiguous() && found_inf.offset() == 0;
  const Tensor inv = foreach_flag ? from_zero(inv_scale) : Tensor();
  std::vector<Tensor> dense_grads(grads.size());
  for (DType dt : {DType::f32, DType::f64}) {
    std::vector<AmpUnscaleOperands> operands;
    for (std::size_t i = 0; i < grads.size(); ++i) {
      if (grads[i].dtype() != dt || !foreach_flag || !detail::has_kernels<AmpUnscaleForeachKernel>(grads[i])) continue;
      dense_grads[i] = from_zero(grads[i]);
      out[i] = detail::alloc(grads[i].shape(), dt, grads[i].device());
      if (out[i].numel() > 0) operands.push_back({arg(out[i]), arg(dense_grads[i])});
    }
    if (operands.empty()) continue;
    detail::kernel<AmpUnscaleForeachKernel>(op, found_inf)(std::span<const AmpUnscaleOperands>(operands),
                                                           arg(found_inf), arg(inv));
    found_inf.storage().bump_version();
  }
  for (std::size_t i = 0; i < grads.size(); ++i)
    if (!out[i].defined()) out[i] = unscale(grads[i], found_inf, inv_scale, 1.0);
  return out;
}

Tensor& amp_update_scale_(Tensor& scale, Tensor& growth_tracker, const Tensor& found_inf, double growth_factor,
                          double backoff_factor, std::int64_t growth_interval) {
  constexpr const char* op = "amp_update_scale_";
  check_one_f32(op, "scale", scale);
  check_one_f32(op, "growth_tracker", growth_tracker);
  check_one_f32(op, "found_inf", found_inf);
  detail::check_same_device(op, scale, growth_tracker);
  detail::check_same_device(op, scale, found_inf);
  if (!(growth_factor > 0) || !(backoff_factor > 0) || !std::isfinite(growth_factor) || !std::isfinite(backoff_factor))
    throw ValueError(fmt::format("{}: expected finite growth and backoff factors > 0, got {} and {}", op,
                                 growth_factor, backoff_factor));
  if (growth_interval < 1 || growth_interval > (std::int64_t(1) << 24))
    throw ValueError(fmt::format("{}: expected growth_interval >= 1 and <= 2^24 (an f32 count), got {}", op,
                                 growth_interval));
  NoGradGuard no_grad;
  detail::kernel<AmpUpdateScaleKernel>(op, scale)(arg(scale), arg(growth_tracker), arg(found_inf), growth_factor,
                                                   backoff_factor, growth_interval);
  scale.storage().bump_version();
  growth_tracker.storage().bump_version();
  return scale;
}

}  // namespace rumus
