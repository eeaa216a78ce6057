#include "rumus/optim/adam.hpp"

#include <fmt/format.h>

#include <cmath>

#include "rumus/ops/creation.hpp"
#include "rumus/ops/elementwise.hpp"

namespace rumus::optim {

namespace {
Tensor& buffer(std::map<std::string, Tensor>& buffers, const char* name, const Tensor& like) {
  auto it = buffers.find(name);
  if (it == buffers.end()) it = buffers.emplace(name, zeros_like(like)).first;
  return it->second;
}
}  // namespace

Adam::Adam(std::vector<ParamGroup> groups, AdamOptions o) : Adam(std::move(groups), o, false) {}

Adam::Adam(std::vector<ParamGroup> groups, AdamOptions o, bool decoupled)
    : Optimizer(std::move(groups), o.lr, o.weight_decay, decoupled ? "AdamW" : "Adam"), options(o), decoupled_(decoupled) {
  const char* name = decoupled ? "AdamW" : "Adam";
  if (!(o.beta1 >= 0 && o.beta1 < 1) || !(o.beta2 >= 0 && o.beta2 < 1))
    throw Error(fmt::format("{}: expected betas in [0, 1), got ({}, {})", name, o.beta1, o.beta2));
  if (!(o.eps >= 0)) throw Error(fmt::format("{}: expected eps >= 0, got {}", name, o.eps));
}

void Adam::update(Tensor& p, const Tensor& grad, ParamState& state, const Group& group) {
  const double b1 = options.beta1, b2 = options.beta2;
  const double t = double(state.step + 1);
  Tensor g = grad;
  if (group.weight_decay != 0) {
    if (decoupled_)
      p.mul_(1.0 - group.lr * group.weight_decay);
    else
      g = add(g, p, group.weight_decay);
  }
  Tensor& m = buffer(state.buffers, "exp_avg", p);
  Tensor& v = buffer(state.buffers, "exp_avg_sq", p);
  m.mul_(b1).add_(g, 1.0 - b1);
  v.mul_(b2).add_(square(g), 1.0 - b2);
  const double bc1 = 1.0 - std::pow(b1, t), bc2 = 1.0 - std::pow(b2, t);
  Tensor denom = add(mul(sqrt(v), 1.0 / std::sqrt(bc2)), options.eps);
  p.add_(div(m, denom), -group.lr / bc1);
}

}  // namespace rumus::optim
