#include "rumus/optim/rmsprop.hpp"

#include <fmt/format.h>

#include "rumus/ops/creation.hpp"
#include "rumus/ops/elementwise.hpp"

namespace rumus::optim {

RMSprop::RMSprop(std::vector<ParamGroup> groups, RMSpropOptions o)
    : Optimizer(std::move(groups), o.lr, o.weight_decay, "RMSprop"), options(o) {
  if (!(o.alpha >= 0 && o.alpha <= 1)) throw Error(fmt::format("RMSprop: expected 0 <= alpha <= 1, got {}", o.alpha));
  if (o.momentum < 0) throw Error(fmt::format("RMSprop: expected momentum >= 0, got {}", o.momentum));
}

std::vector<std::string> RMSprop::buffer_names() const {
  std::vector<std::string> names{"square_avg"};
  if (options.centered) names.push_back("grad_avg");
  if (options.momentum > 0) names.push_back("momentum_buffer");
  return names;
}

void RMSprop::update(Tensor& p, const Tensor& grad, ParamState& state, const Group& group) {
  auto buffer = [&](const char* name) -> Tensor& {
    auto it = state.buffers.find(name);
    if (it == state.buffers.end()) it = state.buffers.emplace(name, zeros_like(p)).first;
    return it->second;
  };
  Tensor g = group.weight_decay != 0 ? add(grad, p, group.weight_decay) : grad;
  Tensor& sq = buffer("square_avg");
  sq.mul_(options.alpha).add_(square(g), 1.0 - options.alpha);
  Tensor avg;
  if (options.centered) {
    Tensor& ga = buffer("grad_avg");
    ga.mul_(options.alpha).add_(g, 1.0 - options.alpha);
    avg = add(sqrt(sub(sq, square(ga))), options.eps);
  } else {
    avg = add(sqrt(sq), options.eps);
  }
  if (options.momentum > 0) {
    Tensor& buf = buffer("momentum_buffer");
    buf.mul_(options.momentum).add_(div(g, avg));
    p.add_(buf, -group.lr);
  } else {
    p.add_(div(g, avg), -group.lr);
  }
}

}  // namespace rumus::optim
