#include "rumus/optim/rmsprop.hpp"

#include <fmt/format.h>

#include "rumus/ops/creation.hpp"
#include "rumus/ops/elementwise.hpp"
#include "moments.hpp"

namespace rumus::optim {

RMSprop::RMSprop(std::vector<ParamGroup> groups, RMSpropOptions o)
    : Optimizer(std::move(groups), o.lr, o.weight_decay, "RMSprop",
                {{"alpha", o.alpha}, {"eps", o.eps}, {"momentum", o.momentum}, {"centered", o.centered ? 1.0 : 0.0}}),
      options(o) {
  for (const Group& g : param_groups()) {
    const double alpha = g.option("alpha"), momentum = g.option("momentum");
    if (!(alpha >= 0 && alpha <= 1)) throw Error(fmt::format("RMSprop: expected 0 <= alpha <= 1, got {}", alpha));
    if (momentum < 0) throw Error(fmt::format("RMSprop: expected momentum >= 0, got {}", momentum));
  }
}

std::vector<std::string> RMSprop::buffer_names(const Group& group) const {
  std::vector<std::string> names{"square_avg"};
  if (group.flag("centered")) names.push_back("grad_avg");
  if (group.option("momentum") > 0) names.push_back("momentum_buffer");
  return names;
}

void RMSprop::update(Tensor& p, const Tensor& grad, ParamState& state, const Group& group) {
  const double alpha = group.option("alpha"), eps = group.option("eps"), momentum = group.option("momentum");
  Tensor g = group.weight_decay != 0 ? add(grad, p, group.weight_decay) : grad;
  Tensor& sq = state_buffer(state.buffers, "square_avg", p);
  sq.mul_(alpha).add_(square(g), 1.0 - alpha);
  Tensor avg;
  if (group.flag("centered")) {
    Tensor& ga = state_buffer(state.buffers, "grad_avg", p);
    ga.mul_(alpha).add_(g, 1.0 - alpha);
    avg = add(sqrt(sub(sq, square(ga))), eps);
  } else {
    avg = add(sqrt(sq), eps);
  }
  if (momentum > 0) {
    Tensor& buf = state_buffer(state.buffers, "momentum_buffer", p);
    buf.mul_(momentum).add_(div(g, avg));
    p.add_(buf, -group.lr);
  } else {
    p.add_(div(g, avg), -group.lr);
  }
}

}  // namespace rumus::optim
