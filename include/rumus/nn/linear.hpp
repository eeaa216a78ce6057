#pragma once
#include "rumus/nn/module.hpp"
#include "rumus/ops/conv.hpp"
#include "rumus/core/export.hpp"

RUMUS_API_BEGIN

namespace rumus::nn {

// y = x W^T + b, W [out, in]; PyTorch's default initialisation.
class Linear : public Module {
 public:
  Linear(std::int64_t in_features, std::int64_t out_features, bool bias = true);
  Tensor forward(const Tensor& x) override { return linear(x, weight, bias); }
  std::string type_name() const override { return "Linear"; }
  std::string extra_repr() const override;
  Tensor weight, bias;
};

// Linear followed by ReLU as one op (linear_relu; torch.ao.nn.intrinsic.LinearReLU).
// Same parameters under the same names as Linear, so state dicts carry over.
class LinearReLU : public Linear {
 public:
  using Linear::Linear;
  Tensor forward(const Tensor& x) override { return linear_relu(x, weight, bias); }
  std::string type_name() const override { return "LinearReLU"; }
};

}  // namespace rumus::nn

RUMUS_API_END
