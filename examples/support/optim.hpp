// The optimizer and learning-rate schedule that --optimizer and --schedule name.
#pragma once
#include <rumus/rumus.hpp>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace example {

// sgd (momentum 0.9), adam, adamw or rmsprop at learning rate `lr`. Weight
// decay defaults to 5e-4 for sgd, 0.05 for adamw and 0 for the others.
inline std::unique_ptr<rumus::optim::Optimizer> make_optimizer(const std::string& name,
                                                               std::vector<rumus::Tensor> params, double lr,
                                                               std::optional<double> weight_decay, bool nesterov) {
  using namespace rumus::optim;
  if (name == "sgd")
    return std::make_unique<SGD>(std::move(params), SGDOptions{.lr = lr,
                                                               .momentum = 0.9,
                                                               .weight_decay = weight_decay.value_or(5e-4),
                                                               .nesterov = nesterov});
  if (name == "adam")
    return std::make_unique<Adam>(std::move(params), AdamOptions{.lr = lr, .weight_decay = weight_decay.value_or(0)});
  if (name == "adamw")
    return std::make_unique<AdamW>(std::move(params),
                                   AdamWOptions{.lr = lr, .weight_decay = weight_decay.value_or(0.05)});
  if (name == "rmsprop")
    return std::make_unique<RMSprop>(std::move(params),
                                     RMSpropOptions{.lr = lr, .weight_decay = weight_decay.value_or(0)});
  throw rumus::Error("optimizer: expected sgd, adam, adamw or rmsprop, got '" + name + "'");
}

// Whether a schedule may cycle the momentum of steps that are captured: SGD's
// captured steps follow a changed momentum, other optimizers' refuse it.
inline bool captured_steps_follow_momentum(const std::string& optimizer) { return optimizer == "sgd"; }

// onecycle (up to `lr` and down again), cosine (down from `lr`) or constant,
// over `total_steps` calls of step().
inline std::unique_ptr<rumus::optim::LRScheduler> make_schedule(const std::string& name,
                                                                rumus::optim::Optimizer& opt, double lr,
                                                                std::int64_t total_steps, bool cycle_momentum = true) {
  using namespace rumus::optim;
  if (name == "onecycle")
    return std::make_unique<OneCycleLR>(opt, lr, std::max<std::int64_t>(total_steps, 2),
                                        OneCycleLROptions{.cycle_momentum = cycle_momentum});
  if (name == "cosine") return std::make_unique<CosineAnnealingLR>(opt, std::max<std::int64_t>(total_steps, 1));
  if (name == "constant") return std::make_unique<StepLR>(opt, std::max<std::int64_t>(total_steps, 1), 1.0);
  throw rumus::Error("schedule: expected onecycle, cosine or constant, got '" + name + "'");
}

}  // namespace example
