#pragma once
// Channel dropout modules (nn::Dropout itself is with the activations).
#include "rumus/nn/module.hpp"
#include "rumus/ops/dropout.hpp"
#include "rumus/core/export.hpp"

RUMUS_API_BEGIN

namespace rumus::nn {

// torch::nn::Dropout2d: dropout2d() in training, the identity in eval.
class Dropout2d : public Module {
 public:
  explicit Dropout2d(double p = 0.5);
  Tensor forward(const Tensor& x) override { return dropout2d(x, p, is_training()); }
  std::string type_name() const override { return "Dropout2d"; }
  std::string extra_repr() const override;
  double p;
};

// torch::nn::Dropout1d: dropout1d() in training, the identity in eval.
class Dropout1d : public Module {
 public:
  explicit Dropout1d(double p = 0.5);
  Tensor forward(const Tensor& x) override { return dropout1d(x, p, is_training()); }
  std::string type_name() const override { return "Dropout1d"; }
  std::string extra_repr() const override;
  double p;
};

}  // namespace rumus::nn

RUMUS_API_END
