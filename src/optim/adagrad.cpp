#include "rumus/optim/adagrad.hpp"

#include <fmt/format.h>

#include "rumus/ops/creation.hpp"
#include "rumus/ops/elementwise.hpp"

namespace rumus::optim {

Adagrad::Adagrad(std::vector<ParamGroup> groups, AdagradOptions o)
    : Optimizer(std::move(groups), o.lr, o.weight_decay, "Adagrad",
                {{"lr_decay", o.lr_decay}, {"initial_accumulator_value", o.initial_accumulator_value}, {"eps", o.eps}}),
      options(o) {
  for (const Group& g : param_groups()) {
    if (!(g.option("lr_decay") >= 0))
      throw Error(fmt::format("Adagrad: expected lr_decay >= 0, got {}", g.option("lr_decay")));
    if (!(g.option("initial_accumulator_value") >= 0))
      throw Error(fmt::format("Adagrad: expected initial_accumulator_value >= 0, got {}",
                              g.option("initial_accumulator_value")));
    if (!(g.option("eps") >= 0)) throw Error(fmt::format("Adagrad: expected eps >= 0, got {}", g.option("eps")));
  }
}

void Adagrad::update(Tensor& p, const Tensor& grad, ParamState& state, const Group& group) {
  auto it = state.buffers.find("sum");
  if (it == state.buffers.end())
    it = state.buffers.emplace("sum", full_like(p, group.option("initial_accumulator_value"))).first;
  Tensor& sum = it->second;
  Tensor g = group.weight_decay != 0 ? add(grad, p, group.weight_decay) : grad;
  const double clr = group.lr / (1.0 + double(state.step) * group.option("lr_decay"));
  sum.add_(square(g));
  p.add_(div(g, add(sqrt(sum), group.option("eps"))), -clr);
}

}  // namespace rumus::optim
