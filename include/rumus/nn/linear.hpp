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

}  // namespace rumus::nn

RUMUS_API_END
