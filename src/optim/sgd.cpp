#include "rumus/optim/sgd.hpp"

#include <fmt/format.h>

#include "rumus/ops/compare.hpp"
#include "rumus/ops/creation.hpp"
#include "rumus/ops/join.hpp"
#include "rumus/ops/optimizer_step.hpp"

namespace rumus::optim {

SGD::SGD(std::vector<ParamGroup> groups, SGDOptions o)
    : Optimizer(std::move(groups), o.lr, o.weight_decay, "SGD",
                {{"momentum", o.momentum}, {"dampening", o.dampening}, {"nesterov", o.nesterov ? 1.0 : 0.0}}),
      options(o) {
  for (const Group& g : param_groups()) {
    const double momentum = g.option("momentum");
    if (momentum < 0) throw Error(fmt::format("SGD: expected momentum >= 0, got {}", momentum));
    if (g.flag("nesterov") && (momentum <= 0 || g.option("dampening") != 0))
      throw Error("SGD: nesterov needs momentum > 0 and dampening = 0");
  }
}

std::vector<std::string> SGD::buffer_names(const Group& group) const {
  if (group.option("momentum") != 0) return {"momentum_buffer"};
  return {};
}

namespace {
// The momentum buffer starts as the gradient on the first update.
bool first_update(const std::map<std::string, Tensor>& buffers, std::int64_t step) {
  return step == 0 || !buffers.count("momentum_buffer");
}
}  // namespace

std::optional<std::array<float, 4>> SGD::step_scalars(const ParamState& state, const Group& group) const {
  const bool first = group.option("momentum") != 0 && first_update(state.buffers, state.step);
  return std::array<float, 4>{float(group.lr), first ? 1.0f : 0.0f, float(group.option("momentum")),
                              float(group.option("dampening"))};
}

Tensor SGD::advance_device_scalars(const Tensor& values, const Group&) const {
  // (first, momentum, dampening): not first once an update was applied; the
  // host sets the momentum and dampening of each step (replayed_options).
  return cat({zeros({1}, {.device = values.device()}), values.narrow(0, 1, 2)});
}

std::map<std::string, std::int64_t> SGD::replayed_options() const { return {{"momentum", 2}, {"dampening", 3}}; }

void SGD::update(Tensor& p, const Tensor& grad, ParamState& state, const Group& group) {
  SgdStep step{.lr = group.lr, .momentum = group.option("momentum"), .dampening = group.option("dampening"),
               .weight_decay = group.weight_decay, .nesterov = group.flag("nesterov"),
               .scalars = captured_scalars(state)};
  Tensor buffer;
  if (step.momentum != 0) {
    step.first = first_update(state.buffers, state.step);
    auto it = state.buffers.find("momentum_buffer");
    if (it == state.buffers.end()) it = state.buffers.emplace("momentum_buffer", empty_like(p)).first;
    buffer = it->second;
  }
  pending_.push_back({p, grad, buffer, step});
}

void SGD::finish_updates() {
  const std::vector<SgdUpdate> updates = std::move(pending_);
  pending_.clear();
  sgd_step_foreach_(updates);
}

}  // namespace rumus::optim
