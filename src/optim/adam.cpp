#include "rumus/optim/adam.hpp"

#include <fmt/format.h>

#include <cmath>

#include "rumus/core/capture.hpp"
#include "rumus/ops/creation.hpp"
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
    : Optimizer(std::move(groups), o.lr, o.weight_decay, decoupled ? "AdamW" : "Adam"), options(o), decoupled_(decoupled) {
  const char* name = decoupled ? "AdamW" : "Adam";
  if (!(o.beta1 >= 0 && o.beta1 < 1) || !(o.beta2 >= 0 && o.beta2 < 1))
    throw Error(fmt::format("{}: expected betas in [0, 1), got ({}, {})", name, o.beta1, o.beta2));
  if (!(o.eps >= 0)) throw Error(fmt::format("{}: expected eps >= 0, got {}", name, o.eps));
}

std::optional<std::array<float, 4>> Adam::step_scalars(const ParamState& state, const Group& group) const {
  const double step = double(state.step + 1);
  return std::array<float, 4>{float(group.lr), float(1.0 - std::pow(options.beta1, step)),
                              float(1.0 - std::pow(options.beta2, step)), state.step == 0 ? 1.0f : 0.0f};
}

void Adam::update(Tensor& p, const Tensor& grad, ParamState& state, const Group& group) {
  Tensor& m = buffer(state.buffers, "exp_avg", p);
  Tensor& v = buffer(state.buffers, "exp_avg_sq", p);
  adam_step_(p, grad, m, v,
             {.lr = group.lr, .beta1 = options.beta1, .beta2 = options.beta2, .eps = options.eps,
              .weight_decay = group.weight_decay, .decoupled = decoupled_, .step = state.step + 1,
              .scalars = captured_scalars(state)});
}

}  // namespace rumus::optim
