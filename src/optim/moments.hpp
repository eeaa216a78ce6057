#pragma once
// What the eager optimizers (RMSprop, NAdam, RAdam) share: their per-parameter
// buffers, created as zeros on first use, and the exponential moving
// averages of the gradient and of its square that the Adam family keeps.
#include <map>
#include <string>

#include "rumus/ops/creation.hpp"
#include "rumus/ops/elementwise.hpp"
#include "rumus/optim/optimizer.hpp"

namespace rumus::optim {

// The buffer `name` of a parameter's state (a state-dict key, as PyTorch names it), zeros shaped as `like` the first time.
inline Tensor& state_buffer(std::map<std::string, Tensor>& buffers, const std::string& name, const Tensor& like) {
  auto it = buffers.find(name);
  if (it == buffers.end()) it = buffers.emplace(name, zeros_like(like)).first;
  return it->second;
}

// exp_avg = beta1 exp_avg + (1 - beta1) g and exp_avg_sq = beta2 exp_avg_sq + (1 - beta2) g^2, in place.
inline void update_moments(Tensor& exp_avg, Tensor& exp_avg_sq, const Tensor& g, double beta1, double beta2) {
  exp_avg.mul_(beta1).add_(g, 1.0 - beta1);
  exp_avg_sq.mul_(beta2).add_(square(g), 1.0 - beta2);
}

}  // namespace rumus::optim
