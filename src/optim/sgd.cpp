#include "rumus/optim/sgd.hpp"

#include <fmt/format.h>

#include "rumus/ops/elementwise.hpp"

namespace rumus::optim {

SGD::SGD(std::vector<ParamGroup> groups, SGDOptions o) : Optimizer(std::move(groups), o.lr, o.weight_decay, "SGD"), options(o) {
  if (o.momentum < 0) throw Error(fmt::format("SGD: expected momentum >= 0, got {}", o.momentum));
  if (o.nesterov && (o.momentum <= 0 || o.dampening != 0))
    throw Error("SGD: nesterov needs momentum > 0 and dampening = 0");
}

void SGD::update(Tensor& p, const Tensor& grad, ParamState& state, const Group& group) {
  Tensor g = group.weight_decay != 0 ? add(grad, p, group.weight_decay) : grad;
  if (options.momentum != 0) {
    auto it = state.buffers.find("momentum_buffer");
    if (it == state.buffers.end()) {
      it = state.buffers.emplace("momentum_buffer", g.clone()).first;
    } else {
      it->second.mul_(options.momentum).add_(g, 1.0 - options.dampening);
    }
    g = options.nesterov ? add(g, it->second, options.momentum) : it->second;
  }
  p.add_(g, -group.lr);
}

}  // namespace rumus::optim
