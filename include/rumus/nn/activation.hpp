#pragma once
// Parameter-free layers, for use in Sequential.
#include "rumus/nn/module.hpp"
#include "rumus/ops/activation.hpp"
#include "rumus/ops/dropout.hpp"
#include "rumus/core/export.hpp"

RUMUS_API_BEGIN

namespace rumus::nn {

class ReLU : public Module {
 public:
  Tensor forward(const Tensor& x) override { return relu(x); }
  Tensor forward_owned(Tensor&& x) override { return relu(std::move(x)); }
  std::string type_name() const override { return "ReLU"; }
};
class GELU : public Module {
 public:
  explicit GELU(std::string approximate = "none") : approximate(std::move(approximate)) {}
  Tensor forward(const Tensor& x) override { return gelu(x, approximate); }
  std::string type_name() const override { return "GELU"; }
  std::string extra_repr() const override;
  std::string approximate;
};
class Tanh : public Module {
 public:
  Tensor forward(const Tensor& x) override { return rumus::tanh(x); }
  Tensor forward_owned(Tensor&& x) override { return rumus::tanh(std::move(x)); }
  std::string type_name() const override { return "Tanh"; }
};
class Sigmoid : public Module {
 public:
  Tensor forward(const Tensor& x) override { return sigmoid(x); }
  Tensor forward_owned(Tensor&& x) override { return sigmoid(std::move(x)); }
  std::string type_name() const override { return "Sigmoid"; }
};
class LeakyReLU : public Module {
 public:
  explicit LeakyReLU(double negative_slope = 0.01) : negative_slope(negative_slope) {}
  Tensor forward(const Tensor& x) override { return leaky_relu(x, negative_slope); }
  std::string type_name() const override { return "LeakyReLU"; }
  std::string extra_repr() const override;
  double negative_slope;
};
class SiLU : public Module {
 public:
  Tensor forward(const Tensor& x) override { return silu(x); }
  std::string type_name() const override { return "SiLU"; }
};
class Hardswish : public Module {
 public:
  Tensor forward(const Tensor& x) override { return hardswish(x); }
  std::string type_name() const override { return "Hardswish"; }
};

// Active only in training mode; draws its masks from the default generator.
class Dropout : public Module {
 public:
  explicit Dropout(double p = 0.5);
  Tensor forward(const Tensor& x) override { return dropout(x, p, is_training()); }
  std::string type_name() const override { return "Dropout"; }
  std::string extra_repr() const override;
  double p;
};

// Flattens dims start_dim..end_dim into one (a view when possible).
class Flatten : public Module {
 public:
  explicit Flatten(std::int64_t start_dim = 1, std::int64_t end_dim = -1) : start_dim(start_dim), end_dim(end_dim) {}
  Tensor forward(const Tensor& x) override { return x.flatten(start_dim, end_dim); }
  std::string type_name() const override { return "Flatten"; }
  std::string extra_repr() const override;
  std::int64_t start_dim, end_dim;
};

}  // namespace rumus::nn

RUMUS_API_END
