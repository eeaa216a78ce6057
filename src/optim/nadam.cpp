#include "rumus/optim/nadam.hpp"

#include <fmt/format.h>

#include <cmath>

#include "rumus/ops/creation.hpp"
#include "rumus/ops/elementwise.hpp"
#include "moments.hpp"

namespace rumus::optim {

NAdam::NAdam(std::vector<ParamGroup> groups, NAdamOptions o)
    : Optimizer(std::move(groups), o.lr, o.weight_decay, "NAdam",
                {{"beta1", o.beta1}, {"beta2", o.beta2}, {"eps", o.eps}, {"momentum_decay", o.momentum_decay}}),
      options(o) {
  for (const Group& g : param_groups()) {
    const double beta1 = g.option("beta1"), beta2 = g.option("beta2");
    if (!(beta1 >= 0 && beta1 < 1) || !(beta2 >= 0 && beta2 < 1))
      throw Error(fmt::format("NAdam: expected betas in [0, 1), got ({}, {})", beta1, beta2));
    if (!(g.option("eps") >= 0)) throw Error(fmt::format("NAdam: expected eps >= 0, got {}", g.option("eps")));
    if (!(g.option("momentum_decay") >= 0))
      throw Error(fmt::format("NAdam: expected momentum_decay >= 0, got {}", g.option("momentum_decay")));
  }
}

void NAdam::update(Tensor& p, const Tensor& grad, ParamState& state, const Group& group) {
  const double beta1 = group.option("beta1"), beta2 = group.option("beta2"), eps = group.option("eps");
  const double decay = group.option("momentum_decay");
  auto mu_at = [&](double t) { return beta1 * (1.0 - 0.5 * std::pow(0.96, t * decay)); };
  const std::int64_t step = state.step + 1;
  double mu_product = 1.0;
  for (std::int64_t t = 1; t <= step; ++t) mu_product *= mu_at(double(t));
  const double mu = mu_at(double(step)), mu_next = mu_at(double(step + 1));
  Tensor g = group.weight_decay != 0 ? add(grad, p, group.weight_decay) : grad;
  Tensor& m = state_buffer(state.buffers, "exp_avg", p);
  Tensor& v = state_buffer(state.buffers, "exp_avg_sq", p);
  update_moments(m, v, g, beta1, beta2);
  Tensor denom = add(sqrt(div(v, 1.0 - std::pow(beta2, double(step)))), eps);
  p.add_(div(g, denom), -group.lr * (1.0 - mu) / (1.0 - mu_product));
  p.add_(div(m, denom), -group.lr * mu_next / (1.0 - mu_product * mu_next));
}

}  // namespace rumus::optim
