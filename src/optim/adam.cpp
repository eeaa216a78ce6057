#include "rumus/optim/adam.hpp"

#include <fmt/format.h>

#include <cmath>

#include "rumus/core/capture.hpp"
#include "rumus/ops/compare.hpp"
#include "rumus/ops/creation.hpp"
#include "rumus/ops/join.hpp"
#include "rumus/ops/elementwise.hpp"
#include "rumus/ops/optimizer_step.hpp"

namespace rumus::optim {

namespace {
Tensor& buffer(std::map<std::string, Tensor>& buffers, const char* name, const Tensor& like) {
  auto it = buffers.find(name);
  // Captured, a fill would run at every replay: the kernel takes the moments
  // as zero on the first update instead of reading them.
  if (it == buffers.end()) it = buffers.emplace(name, is_capturing() ? empty_like(like) : zeros_like(like)).first;
  return it->second;
}
}  // namespace

Adam::Adam(std::vector<ParamGroup> groups, AdamOptions o) : Adam(std::move(groups), o, false) {}

Adam::Adam(std::vector<ParamGroup> groups, AdamOptions o, bool decoupled)
    : Optimizer(std::move(groups), o.lr, o.weight_decay, decoupled ? "AdamW" : "Adam",
                {{"beta1", o.beta1}, {"beta2", o.beta2}, {"eps", o.eps}, {"amsgrad", o.amsgrad ? 1.0 : 0.0}}),
      options(o), decoupled_(decoupled) {
  const char* name = decoupled ? "AdamW" : "Adam";
  for (const Group& g : param_groups()) {
    const double beta1 = g.option("beta1"), beta2 = g.option("beta2"), eps = g.option("eps");
    if (!(beta1 >= 0 && beta1 < 1) || !(beta2 >= 0 && beta2 < 1))
      throw Error(fmt::format("{}: expected betas in [0, 1), got ({}, {})", name, beta1, beta2));
    if (!(eps >= 0)) throw Error(fmt::format("{}: expected eps >= 0, got {}", name, eps));
  }
}

std::vector<std::string> Adam::buffer_names(const Group& group) const {
  if (group.flag("amsgrad")) return {"exp_avg", "exp_avg_sq", "max_exp_avg_sq"};
  return {"exp_avg", "exp_avg_sq"};
}

std::optional<std::array<float, 4>> Adam::step_scalars(const ParamState& state, const Group& group) const {
  if (group.flag("amsgrad")) return std::nullopt;  // composed update: nothing to read at replay time
  const double step = double(state.step + 1);
  return std::array<float, 4>{float(group.lr), float(1.0 - std::pow(group.option("beta1"), step)),
                              float(1.0 - std::pow(group.option("beta2"), step)), state.step == 0 ? 1.0f : 0.0f};
}

Tensor Adam::advance_device_scalars(const Tensor& values, const Group& group) const {
  // (1 - beta1^step, 1 - beta2^step, first) one step on, in f32:
  // 1 - beta^(t+1) = beta * (1 - beta^t) + (1 - beta), a sum of positive terms
  // within an ulp or two of the host's double pow, where exp and log would
  // lose most bits of 1 - 0.999^t.
  auto next = [&](std::int64_t i, double beta) { return add(mul(values.narrow(0, i, 1), beta), 1.0 - beta); };
  return cat({next(0, group.option("beta1")), next(1, group.option("beta2")), zeros({1}, {.device = values.device()})});
}

void Adam::update(Tensor& p, const Tensor& grad, ParamState& state, const Group& group) {
  const double beta1 = group.option("beta1"), beta2 = group.option("beta2"), eps = group.option("eps");
  Tensor& m = buffer(state.buffers, "exp_avg", p);
  Tensor& v = buffer(state.buffers, "exp_avg_sq", p);
  if (!group.flag("amsgrad")) {
    pending_.push_back({p, grad, m, v,
                        {.lr = group.lr, .beta1 = beta1, .beta2 = beta2, .eps = eps, .weight_decay = group.weight_decay,
                         .decoupled = decoupled_, .step = state.step + 1, .scalars = captured_scalars(state)}});
    return;
  }
  // AMSGrad, composed as PyTorch's single-tensor path: the denominator uses
  // the largest exp_avg_sq seen so far.
  Tensor g = grad;
  if (decoupled_) p.mul_(1.0 - group.lr * group.weight_decay);
  else if (group.weight_decay != 0) g = add(grad, p, group.weight_decay);
  m.mul_(beta1).add_(g, 1.0 - beta1);
  v.mul_(beta2).add_(square(g), 1.0 - beta2);
  Tensor& vmax = buffer(state.buffers, "max_exp_avg_sq", p);
  vmax.copy_(maximum(vmax, v));
  const double step = double(state.step + 1);
  const double bias1 = 1.0 - std::pow(beta1, step), bias2 = 1.0 - std::pow(beta2, step);
  Tensor denom = add(div(sqrt(vmax), std::sqrt(bias2)), eps);
  p.add_(div(m, denom), -group.lr / bias1);
}

void Adam::finish_updates() {
  const std::vector<AdamUpdate> updates = std::move(pending_);
  pending_.clear();
  adam_step_foreach_(updates);
}

}  // namespace rumus::optim
