#include <fmt/format.h>

#include "rumus/autograd/grad_mode.hpp"
#include "rumus/nn/normalization.hpp"
#include "rumus/ops/creation.hpp"

namespace rumus::nn {

InstanceNorm2d::InstanceNorm2d(std::int64_t c, double eps, double momentum, bool affine, bool track_running_stats)
    : num_features(c), eps(eps), momentum(momentum) {
  if (c < 1) throw Error(fmt::format("{}: expected num_features >= 1, got {}", type_name(), c));
  if (affine) {
    weight = register_parameter("weight", ones({c}));
    bias = register_parameter("bias", zeros({c}));
  }
  if (track_running_stats) {
    running_mean = register_buffer("running_mean", zeros({c}));
    running_var = register_buffer("running_var", ones({c}));
    num_batches_tracked = register_buffer("num_batches_tracked", zeros({}, {.dtype = DType::i64}));
  }
}

Tensor InstanceNorm2d::forward_batched(const Tensor& x, std::int64_t dims) {
  if (x.dim() != dims && x.dim() != dims - 1)
    throw ShapeError(fmt::format("{}: expected input of {} dims (batched) or {} (unbatched), got {}", type_name(), dims,
                                 dims - 1, shape_str(x.shape())));
  const bool unbatched = x.dim() == dims - 1;
  const bool tracking = running_mean.defined();
  if (tracking && is_training()) {
    NoGradGuard no_grad;
    num_batches_tracked.add_(1.0);
  }
  Tensor y = instance_norm(unbatched ? x.unsqueeze(0) : x, running_mean, running_var, weight, bias,
                           is_training() || !tracking, momentum, eps);
  return unbatched ? y.squeeze(0) : y;
}

std::string InstanceNorm2d::extra_repr() const {
  return fmt::format("{}, eps={}, momentum={}, affine={}, track_running_stats={}", num_features, eps, momentum,
                     weight.defined() ? "true" : "false", running_mean.defined() ? "true" : "false");
}

}  // namespace rumus::nn
