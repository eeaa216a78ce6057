#pragma once
#include "rumus/nn/module.hpp"
#include "rumus/ops/normalization.hpp"
#include "rumus/core/export.hpp"

RUMUS_API_BEGIN

namespace rumus::nn {

// Batch statistics in training (updating the running_mean/running_var
// buffers), running statistics in eval; as torch.nn.BatchNorm2d.
class BatchNorm2d : public Module {
 public:
  explicit BatchNorm2d(std::int64_t num_features, double eps = 1e-5, double momentum = 0.1, bool affine = true);
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "BatchNorm2d"; }
  std::string extra_repr() const override;
  double eps, momentum;
  Tensor weight, bias;  // undefined without affine
  Tensor running_mean, running_var, num_batches_tracked;
};

// torch::nn::BatchNorm1d: input [N, C] or [N, C, L]; BatchNorm2d's parameters,
// buffers and names.
class BatchNorm1d : public BatchNorm2d {
 public:
  using BatchNorm2d::BatchNorm2d;
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "BatchNorm1d"; }
};

// torch::nn::GroupNorm: weight and bias [num_channels] (affine), group_norm().
class GroupNorm : public Module {
 public:
  GroupNorm(std::int64_t num_groups, std::int64_t num_channels, double eps = 1e-5, bool affine = true);
  Tensor forward(const Tensor& x) override { return group_norm(x, num_groups, weight, bias, eps); }
  std::string type_name() const override { return "GroupNorm"; }
  std::string extra_repr() const override;
  std::int64_t num_groups, num_channels;
  double eps;
  Tensor weight, bias;
};

// Normalises over the trailing normalized_shape dims, with elementwise affine.
class LayerNorm : public Module {
 public:
  explicit LayerNorm(Shape normalized_shape, double eps = 1e-5, bool elementwise_affine = true);
  Tensor forward(const Tensor& x) override { return layer_norm(x, normalized_shape, weight, bias, eps); }
  std::string type_name() const override { return "LayerNorm"; }
  std::string extra_repr() const override;
  Shape normalized_shape;
  double eps;
  Tensor weight, bias;
};

}  // namespace rumus::nn

RUMUS_API_END
