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

// torch::nn::InstanceNorm2d: statistics per sample and channel (instance_norm);
// affine and track_running_stats off by default, as PyTorch. With
// track_running_stats the buffers are BatchNorm's (running_mean, running_var,
// num_batches_tracked), updated in training and normalising in eval.
// Input [N, C, H, W] or unbatched [C, H, W].
class InstanceNorm2d : public Module {
 public:
  explicit InstanceNorm2d(std::int64_t num_features, double eps = 1e-5, double momentum = 0.1, bool affine = false,
                          bool track_running_stats = false);
  Tensor forward(const Tensor& x) override { return forward_batched(x, 4); }
  std::string type_name() const override { return "InstanceNorm2d"; }
  std::string extra_repr() const override;
  std::int64_t num_features;
  double eps, momentum;
  Tensor weight, bias;                                     // undefined without affine
  Tensor running_mean, running_var, num_batches_tracked;  // undefined without track_running_stats

 protected:
  // `dims`: the batched input's rank; one less is the unbatched form.
  Tensor forward_batched(const Tensor& x, std::int64_t dims);
};

// torch::nn::InstanceNorm1d: input [N, C, L] or unbatched [C, L]; InstanceNorm2d's names.
class InstanceNorm1d : public InstanceNorm2d {
 public:
  using InstanceNorm2d::InstanceNorm2d;
  Tensor forward(const Tensor& x) override { return forward_batched(x, 3); }
  std::string type_name() const override { return "InstanceNorm1d"; }
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
