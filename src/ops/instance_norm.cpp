// instance_norm: group_norm with one channel per group for the batch's own
// statistics; the running statistics (when given) are updated off the tape.
#include "op_util.hpp"
#include "rumus/autograd/grad_mode.hpp"
#include "rumus/ops/elementwise.hpp"
#include "rumus/ops/normalization.hpp"
#include "rumus/ops/reduction.hpp"

namespace rumus {

namespace {

void check_channel_vector(const char* what, const Tensor& t, const Tensor& input, std::int64_t c) {
  if (!t.defined()) return;
  detail::check_same_device("instance_norm", input, t);
  if (t.shape() != Shape{c})
    throw ShapeError(fmt::format("instance_norm: expected {} of shape [{}] for input {}, got {}", what, c,
                                 shape_str(input.shape()), shape_str(t.shape())));
}

}  // namespace

Tensor instance_norm(const Tensor& input, const Tensor& running_mean, const Tensor& running_var, const Tensor& weight,
                     const Tensor& bias, bool use_input_stats, double momentum, double eps) {
  const char* op = "instance_norm";
  detail::check_defined(op, input);
  detail::check_floating(op, input);
  if (input.dim() < 3)
    throw ShapeError(fmt::format("{}: expected input of at least 3 dims [N, C, ...], got {}", op,
                                 shape_str(input.shape())));
  const std::int64_t n = input.shape()[0], c = input.shape()[1], positions = input.numel() / std::max<std::int64_t>(n * c, 1);
  check_channel_vector("weight", weight, input, c);
  check_channel_vector("bias", bias, input, c);
  check_channel_vector("running_mean", running_mean, input, c);
  check_channel_vector("running_var", running_var, input, c);
  if (running_mean.defined() != running_var.defined())
    throw ValueError(fmt::format("{}: expected running_mean and running_var both or neither", op));
  std::vector<std::int64_t> spatial;
  for (std::int64_t d = 2; d < input.dim(); ++d) spatial.push_back(d);
  if (!use_input_stats) {
    if (!running_mean.defined())
      throw ValueError(fmt::format("{}: expected running_mean and running_var when use_input_stats is false", op));
    Shape bshape(std::size_t(input.dim()), 1);
    bshape[1] = c;
    Tensor y = div(sub(input, running_mean.view(bshape)), sqrt(add(running_var.view(bshape), eps)));
    if (weight.defined()) y = mul(y, weight.view(bshape));
    if (bias.defined()) y = add(y, bias.view(bshape));
    return y;
  }
  if (positions <= 1)
    throw ValueError(fmt::format("{}: expected more than 1 position per channel to take statistics, got input {}",
                                 op, shape_str(input.shape())));
  if (running_mean.defined()) {
    NoGradGuard no_grad;
    const Tensor x = input.detach();
    const Tensor m = mean(x, spatial);  // [N, C]
    const Tensor v = div(sum(square(sub(x, mean(x, spatial, true))), spatial), double(positions - 1));
    Tensor rm = running_mean, rv = running_var;  // handles onto the caller's buffers
    rm.mul_(1.0 - momentum).add_(mean(m, {0}).to(rm.dtype()), momentum);
    rv.mul_(1.0 - momentum).add_(mean(v, {0}).to(rv.dtype()), momentum);
  }
  return group_norm(input, c, weight, bias, eps);
}

}  // namespace rumus
