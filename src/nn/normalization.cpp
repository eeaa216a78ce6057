#include "rumus/nn/normalization.hpp"

#include <fmt/format.h>

#include "rumus/autograd/grad_mode.hpp"
#include "rumus/ops/creation.hpp"

namespace rumus::nn {
namespace {
void check_positive(const char* layer, const char* what, std::int64_t v) {
  if (v < 1) throw Error(fmt::format("{}: expected {} >= 1, got {}", layer, what, v));
}
}  // namespace

BatchNorm2d::BatchNorm2d(std::int64_t c, double eps, double momentum, bool affine) : eps(eps), momentum(momentum) {
  check_positive("BatchNorm2d", "num_features", c);
  if (affine) {
    weight = register_parameter("weight", ones({c}));
    bias = register_parameter("bias", zeros({c}));
  }
  running_mean = register_buffer("running_mean", zeros({c}));
  running_var = register_buffer("running_var", ones({c}));
  num_batches_tracked = register_buffer("num_batches_tracked", zeros({}, {.dtype = DType::i64}));
}

Tensor BatchNorm2d::forward(const Tensor& x) {
  if (is_training()) {
    NoGradGuard no_grad;
    num_batches_tracked.add_(1.0);
  }
  return batch_norm2d(x, running_mean, running_var, weight, bias, is_training(), momentum, eps);
}

Tensor BatchNorm1d::forward(const Tensor& x) {
  if (is_training()) {
    NoGradGuard no_grad;
    num_batches_tracked.add_(1.0);
  }
  return batch_norm1d(x, running_mean, running_var, weight, bias, is_training(), momentum, eps);
}

GroupNorm::GroupNorm(std::int64_t groups, std::int64_t channels, double eps, bool affine)
    : num_groups(groups), num_channels(channels), eps(eps) {
  check_positive("GroupNorm", "num_groups", groups);
  check_positive("GroupNorm", "num_channels", channels);
  if (channels % groups != 0)
    throw Error(fmt::format("GroupNorm: num_channels {} must be divisible by num_groups {}", channels, groups));
  if (affine) {
    weight = register_parameter("weight", ones({channels}));
    bias = register_parameter("bias", zeros({channels}));
  }
}

LayerNorm::LayerNorm(Shape shape, double eps, bool affine) : normalized_shape(std::move(shape)), eps(eps) {
  if (normalized_shape.empty()) throw Error("LayerNorm: expected a non-empty normalized_shape");
  for (auto d : normalized_shape) check_positive("LayerNorm", "every normalized dim", d);
  if (affine) {
    weight = register_parameter("weight", ones(normalized_shape));
    bias = register_parameter("bias", zeros(normalized_shape));
  }
}

}  // namespace rumus::nn
