// Batch and layer normalisation. The forward runs as untaped tensor ops; one
// node per call carries the closed-form backward (also tensor ops), which saves
// only the normalised input and the inverse standard deviation.
#include "rumus/ops/normalization.hpp"

#include "autocast.hpp"
#include "op_util.hpp"
#include "rumus/ops/elementwise.hpp"
#include "rumus/ops/reduction.hpp"

namespace rumus {

using autograd::SavedTensor;

namespace {

Tensor rsqrt_plus(const Tensor& var, double eps) {
  return detail::unary_kernel(UnaryOp::rsqrt, add(var, eps));
}

// dx of y = xhat * w + b given dy, xhat and invstd, with the statistics taken over `dims`.
Tensor normalized_input_grad(const Tensor& g, const Tensor& xhat, const Tensor& invstd, const Tensor& w_b,
                             const std::vector<std::int64_t>& dims) {
  Tensor dxhat = w_b.defined() ? mul(g, w_b) : g;
  Tensor centred = sub(dxhat, mean(dxhat, dims, true));
  return mul(sub(centred, mul(xhat, mean(mul(dxhat, xhat), dims, true))), invstd);
}

void check_param(const char* op, const char* what, const Tensor& x, const Tensor& p, const Shape& shape) {
  if (!p.defined()) return;
  detail::check_same_device(op, x, p);
  if (p.dtype() != x.dtype())
    throw DTypeError(fmt::format("{}: {} dtype {} differs from input dtype {}", op, what, dtype_name(p.dtype()),
                                 dtype_name(x.dtype())));
  if (p.shape() != shape)
    throw ShapeError(fmt::format("{}: expected {} of shape {}, got {}", op, what, shape_str(shape),
                                 shape_str(p.shape())));
}

}  // namespace

Tensor batch_norm2d(const Tensor& input_in, const Tensor& running_mean, const Tensor& running_var,
                    const Tensor& weight_in, const Tensor& bias_in, bool training, double momentum, double eps) {
  const char* op = "batch_norm2d";
  const auto cast = detail::autocast(op, input_in, weight_in, bias_in);
  const Tensor &input = cast[0], &weight = cast[1], &bias = cast[2];
  detail::check_floating(op, input);
  if (input.dim() != 4)
    throw ShapeError(fmt::format("batch_norm2d: expected input of 4 dims [N, C, H, W], got {}",
                                 shape_str(input.shape())));
  const std::int64_t c = input.shape()[1];
  check_param(op, "weight", input, weight, {c});
  check_param(op, "bias", input, bias, {c});
  check_param(op, "running_mean", input, running_mean, {c});
  check_param(op, "running_var", input, running_var, {c});
  if (running_mean.defined() != running_var.defined())
    throw Error("batch_norm2d: running_mean and running_var must both be given or both be undefined");
  const Shape cshape{1, c, 1, 1};
  const std::vector<std::int64_t> dims{0, 2, 3};

  if (!training) {
    if (!running_mean.defined())
      throw Error("batch_norm2d: evaluation mode needs running_mean and running_var");
    // y = x * scale + shift with per-channel scale = w / sqrt(var + eps): taped ops, so gradients follow.
    Tensor scale = rsqrt_plus(running_var.detach(), eps);
    if (weight.defined()) scale = mul(scale, weight);
    Tensor shift = neg(mul(running_mean.detach(), scale));
    if (bias.defined()) shift = add(shift, bias);
    return add(mul(input, scale.reshape(cshape)), shift.reshape(cshape));
  }

  const std::int64_t count = input.numel() / std::max<std::int64_t>(c, 1);
  if (count <= 1)
    throw ShapeError(fmt::format("batch_norm2d: expected more than 1 value per channel in training, got input {}",
                                 shape_str(input.shape())));
  Tensor xhat, invstd, out;
  {
    NoGradGuard no_grad;
    Tensor x = input.detach();
    Tensor mu = mean(x, dims, true);
    Tensor centred = sub(x, mu);
    Tensor var = mean(square(centred), dims, true);
    invstd = rsqrt_plus(var, eps);
    xhat = mul(centred, invstd);
    out = xhat;
    if (weight.defined()) out = mul(out, weight.detach().reshape(cshape));
    if (bias.defined()) out = add(out, bias.detach().reshape(cshape));
    if (out.storage_ptr() == xhat.storage_ptr()) out = xhat.clone();
    if (running_mean.defined()) {
      // PyTorch: running statistics track the unbiased batch variance.
      Tensor unbiased = mul(var, double(count) / double(count - 1));
      running_mean.detach().mul_(1.0 - momentum).add_(mu.reshape({c}), momentum);
      running_var.detach().mul_(1.0 - momentum).add_(unbiased.reshape({c}), momentum);
    }
  }
  if (autograd::needs_grad({&input, &weight, &bias})) {
    const bool gx = input.requires_grad(), gw = weight.defined() && weight.requires_grad(),
               gb = bias.defined() && bias.requires_grad();
    autograd::record(op, {input, weight, bias}, out,
                     [gx, gw, gb, dims, cshape, c, sxh = SavedTensor(xhat), si = SavedTensor(invstd),
                      sw = SavedTensor(weight.defined() ? weight.detach() : Tensor())](const Tensor& g) {
                       const Tensor& xh = sxh.get();
                       Tensor w = sw.defined() ? sw.get().reshape(cshape) : Tensor();
                       return std::vector<Tensor>{gx ? normalized_input_grad(g, xh, si.get(), w, dims) : Tensor(),
                                                  gw ? sum(mul(g, xh), dims).reshape({c}) : Tensor(),
                                                  gb ? sum(g, dims).reshape({c}) : Tensor()};
                     });
  }
  return out;
}

Tensor layer_norm(const Tensor& input_in, const Shape& normalized_shape, const Tensor& weight_in,
                  const Tensor& bias_in, double eps) {
  const char* op = "layer_norm";
  const auto cast = detail::autocast(op, input_in, weight_in, bias_in);
  const Tensor &input = cast[0], &weight = cast[1], &bias = cast[2];
  detail::check_floating(op, input);
  const auto k = std::int64_t(normalized_shape.size());
  bool fits = k >= 1 && k <= input.dim();
  for (std::int64_t i = 0; fits && i < k; ++i)
    fits = input.shape()[input.dim() - k + i] == normalized_shape[i];
  if (!fits)
    throw ShapeError(fmt::format("layer_norm: input {} does not end in normalized_shape {}",
                                 shape_str(input.shape()), shape_str(normalized_shape)));
  check_param(op, "weight", input, weight, normalized_shape);
  check_param(op, "bias", input, bias, normalized_shape);
  const std::int64_t d = numel_of(normalized_shape);
  const std::vector<std::int64_t> dims{1};
  Tensor xhat, invstd, out;
  {
    NoGradGuard no_grad;
    Tensor x = input.detach().reshape({-1, d});
    Tensor centred = sub(x, mean(x, dims, true));
    invstd = rsqrt_plus(mean(square(centred), dims, true), eps);
    xhat = mul(centred, invstd);
    out = xhat;
    if (weight.defined()) out = mul(out, weight.detach().reshape({d}));
    if (bias.defined()) out = add(out, bias.detach().reshape({d}));
    if (out.storage_ptr() == xhat.storage_ptr()) out = xhat.clone();
    out = out.view(input.shape());
  }
  if (autograd::needs_grad({&input, &weight, &bias})) {
    const bool gx = input.requires_grad(), gw = weight.defined() && weight.requires_grad(),
               gb = bias.defined() && bias.requires_grad();
    autograd::record(op, {input, weight, bias}, out,
                     [gx, gw, gb, d, dims, in_shape = input.shape(), normalized_shape, sxh = SavedTensor(xhat),
                      si = SavedTensor(invstd),
                      sw = SavedTensor(weight.defined() ? weight.detach() : Tensor())](const Tensor& grad) {
                       Tensor g = grad.reshape({-1, d});
                       const Tensor& xh = sxh.get();
                       Tensor w = sw.defined() ? sw.get().reshape({d}) : Tensor();
                       return std::vector<Tensor>{
                           gx ? normalized_input_grad(g, xh, si.get(), w, dims).view(in_shape) : Tensor(),
                           gw ? sum(mul(g, xh), {0}).view(normalized_shape) : Tensor(),
                           gb ? sum(g, {0}).view(normalized_shape) : Tensor()};
                     });
  }
  return out;
}

}  // namespace rumus
