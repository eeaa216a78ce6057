#include "rumus/optim/radam.hpp"

#include <fmt/format.h>

#include <cmath>

#include "rumus/ops/creation.hpp"
#include "rumus/ops/elementwise.hpp"
#include "moments.hpp"

namespace rumus::optim {

RAdam::RAdam(std::vector<ParamGroup> groups, RAdamOptions o)
    : Optimizer(std::move(groups), o.lr, o.weight_decay, "RAdam",
                {{"beta1", o.beta1}, {"beta2", o.beta2}, {"eps", o.eps}}),
      options(o) {
  for (const Group& g : param_groups()) {
    const double beta1 = g.option("beta1"), beta2 = g.option("beta2");
    if (!(beta1 >= 0 && beta1 < 1) || !(beta2 >= 0 && beta2 < 1))
      throw Error(fmt::format("RAdam: expected betas in [0, 1), got ({}, {})", beta1, beta2));
    if (!(g.option("eps") >= 0)) throw Error(fmt::format("RAdam: expected eps >= 0, got {}", g.option("eps")));
  }
}

void RAdam::update(Tensor& p, const Tensor& grad, ParamState& state, const Group& group) {
  const double beta1 = group.option("beta1"), beta2 = group.option("beta2"), eps = group.option("eps");
  const double step = double(state.step + 1);
  const double bias1 = 1.0 - std::pow(beta1, step), bias2 = 1.0 - std::pow(beta2, step);
  Tensor g = group.weight_decay != 0 ? add(grad, p, group.weight_decay) : grad;
  Tensor& m = state_buffer(state.buffers, "exp_avg", p);
  Tensor& v = state_buffer(state.buffers, "exp_avg_sq", p);
  update_moments(m, v, g, beta1, beta2);
  // The length of the approximated simple moving average, and its limit.
  const double rho_inf = 2.0 / (1.0 - beta2) - 1.0;
  const double rho = rho_inf - 2.0 * step * std::pow(beta2, step) / bias2;
  if (rho > 5.0) {
    const double rect = std::sqrt((rho - 4) * (rho - 2) * rho_inf / ((rho_inf - 4) * (rho_inf - 2) * rho));
    p.add_(div(m, add(sqrt(v), eps)), -group.lr * rect * std::sqrt(bias2) / bias1);
  } else {
    p.add_(m, -group.lr / bias1);
  }
}

}  // namespace rumus::optim
