// Batch and layer normalisation. A device with the family's kernels runs
// training-mode batch_norm2d (batch-norm family) and layer_norm (layer-norm
// family) on them, saving the input and the statistics for the backward.
// Elsewhere the forward runs as untaped tensor ops; one node per call carries
// the closed-form backward (also tensor ops), which saves only the normalised
// input and the inverse standard deviation.
#include "rumus/ops/normalization.hpp"

#include "autocast.hpp"
#include "op_util.hpp"
#include "../backend/batch_norm.hpp"
#include "../backend/layer_norm.hpp"
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

// The gradients of y = xhat * w + b, xhat normalised over `dims`, written with
// ops from the input itself (saved with its graph), for create_graph: the
// statistics are recomputed on the tape, so the result differentiates to any
// order. `w_b` is the weight shaped to broadcast against x (or undefined);
// the weight's and bias's gradients sum over `param_dims`.
std::vector<Tensor> composed_norm_grads(const Tensor& g, const Tensor& x, const Tensor& w_b, double eps,
                                        const std::vector<std::int64_t>& dims,
                                        const std::vector<std::int64_t>& param_dims, bool gx, bool gw, bool gb) {
  const Tensor centred = sub(x, mean(x, dims, true));
  const Tensor invstd = div(1.0, sqrt(add(mean(square(centred), dims, true), eps)));
  const Tensor xhat = mul(centred, invstd);
  return {gx ? normalized_input_grad(g, xhat, invstd, w_b, dims) : Tensor(),
          gw ? sum(mul(g, xhat), param_dims) : Tensor(), gb ? sum(g, param_dims) : Tensor()};
}

// `mixed`: a 16-bit x may come with f32 parameters (batch_norm2d's mixed form).
void check_param(const char* op, const char* what, const Tensor& x, const Tensor& p, const Shape& shape,
                 bool mixed = false) {
  if (!p.defined()) return;
  detail::check_same_device(op, x, p);
  if (p.dtype() != x.dtype() && !(mixed && is_16bit_float(x.dtype()) && p.dtype() == DType::f32))
    throw DTypeError(fmt::format("{}: {} dtype {} differs from input dtype {}", op, what, dtype_name(p.dtype()),
                                 dtype_name(x.dtype())));
  if (p.shape() != shape)
    throw ShapeError(fmt::format("{}: expected {} of shape {}, got {}", op, what, shape_str(shape),
                                 shape_str(p.shape())));
}

// layer_norm on the device's own kernels: one pass each way; saves the input,
// the row means and the inverse standard deviations.
Tensor fused_layer_norm(const char* op, const Tensor& input, const Shape& normalized_shape, const Tensor& weight,
                        const Tensor& bias, double eps, std::int64_t d) {
  Tensor x = input.detach().contiguous().reshape({-1, d});
  const std::int64_t rows = x.shape()[0];
  Tensor out = detail::alloc(x.shape(), x.dtype(), x.device(), op);
  Tensor mean = detail::alloc({rows}, x.dtype(), x.device(), op);
  Tensor invstd = detail::alloc({rows}, x.dtype(), x.device(), op);
  Tensor w = weight.defined() ? weight.detach().contiguous().reshape({d}) : Tensor();
  Tensor b = bias.defined() ? bias.detach().contiguous().reshape({d}) : Tensor();
  auto optional = [](const Tensor& t, const Tensor& like) {
    return t.defined() ? detail::arg(t) : TensorArg{nullptr, like.dtype(), &like.layout()};
  };
  detail::kernel<LayerNormForwardKernel>(op, x)(detail::arg(out), detail::arg(mean), detail::arg(invstd),
                                                detail::arg(x), optional(w, x), optional(b, x), eps);
  Tensor result = out.view(input.shape());
  if (autograd::needs_grad({&input, &weight, &bias})) {
    const bool gx = input.requires_grad(), gw = weight.defined() && weight.requires_grad(),
               gb = bias.defined() && bias.requires_grad();
    autograd::record(op, {input, weight, bias}, result,
                     [op, gx, gw, gb, d, eps, optional, in_shape = input.shape(), normalized_shape,
                      sx = SavedTensor(x), sm = SavedTensor(mean), si = SavedTensor(invstd), sw = SavedTensor(w),
                      sin = SavedTensor(input), swg = SavedTensor(weight)](const Tensor& grad) {
                       if (grad_enabled()) {  // under create_graph: the formula with ops, recorded
                         auto grads = composed_norm_grads(grad.reshape({-1, d}), sin.get().reshape({-1, d}),
                                                          swg.defined() ? swg.get().reshape({d}) : Tensor(), eps, {1},
                                                          {0}, gx, gw, gb);
                         return std::vector<Tensor>{gx ? grads[0].view(in_shape) : Tensor(),
                                                    gw ? grads[1].view(normalized_shape) : Tensor(),
                                                    gb ? grads[2].view(normalized_shape) : Tensor()};
                       }
                       const Tensor& x = sx.get();
                       Tensor g = grad.contiguous().reshape({-1, d});
                       Tensor dx = gx ? detail::alloc(x.shape(), x.dtype(), x.device(), op) : Tensor();
                       Tensor dw = gw ? detail::alloc({d}, x.dtype(), x.device(), op) : Tensor();
                       Tensor db = gb ? detail::alloc({d}, x.dtype(), x.device(), op) : Tensor();
                       Tensor w = sw.defined() ? sw.get() : Tensor();
                       detail::kernel<LayerNormBackwardKernel>(op, x)(
                           optional(dx, x), optional(dw, x), optional(db, x), detail::arg(g), detail::arg(x),
                           detail::arg(sm.get()), detail::arg(si.get()), optional(w, x));
                       return std::vector<Tensor>{gx ? dx.view(in_shape) : Tensor(),
                                                  gw ? dw.view(normalized_shape) : Tensor(),
                                                  gb ? db.view(normalized_shape) : Tensor()};
                     },
                     {}, autograd::Backward::differentiable);
  }
  return result;
}

// A [C] kernel operand, or an absent one (null storage) where t is undefined.
TensorArg optional_arg(const Tensor& t, const Tensor& like) {
  return t.defined() ? detail::arg(t) : TensorArg{nullptr, like.dtype(), &like.layout()};
}

// Training-mode batch_norm2d on the device's batch-norm kernels: two passes
// over the input forward (statistics, output), two over it and the gradient
// backward; saves the input, the channel means and inverse standard
// deviations, and the weight. A 16-bit input's statistics are f32, and so
// must its weight and bias be (running statistics are widened and written back).
Tensor fused_batch_norm2d(const char* op, const Tensor& input, const Tensor& running_mean, const Tensor& running_var,
                          const Tensor& weight, const Tensor& bias, double momentum, double eps) {
  const std::int64_t n = input.size(0), c = input.size(1), hw = input.size(2) * input.size(3);
  const Tensor x = input.detach().contiguous().reshape({n, c, hw});
  const DType stats = is_16bit_float(x.dtype()) ? DType::f32 : x.dtype();
  Tensor mean = detail::alloc({c}, stats, x.device(), op);
  Tensor invstd = detail::alloc({c}, stats, x.device(), op);
  // The kernel updates the running statistics in place: strided ones through a contiguous copy.
  Tensor rm = running_mean.defined() ? running_mean.detach().contiguous().to(stats) : Tensor();
  Tensor rv = running_var.defined() ? running_var.detach().contiguous().to(stats) : Tensor();
  detail::kernel<BatchNormStatsKernel>(op, x)(detail::arg(mean), detail::arg(invstd), optional_arg(rm, mean),
                                              optional_arg(rv, mean), detail::arg(x), eps, momentum);
  for (auto [running, updated] : {std::pair{&running_mean, &rm}, {&running_var, &rv}}) {
    if (!running->defined()) continue;
    if (updated->storage_ptr() == running->storage_ptr()) running->storage().bump_version();
    else running->detach().copy_(*updated);
  }
  const Tensor w = weight.defined() ? weight.detach().contiguous() : Tensor();
  const Tensor b = bias.defined() ? bias.detach().contiguous() : Tensor();
  Tensor out = detail::alloc(x.shape(), x.dtype(), x.device(), op);
  detail::kernel<BatchNormForwardKernel>(op, x)(detail::arg(out), detail::arg(x), detail::arg(mean),
                                                detail::arg(invstd), optional_arg(w, mean), optional_arg(b, mean));
  Tensor result = out.view(input.shape());
  if (autograd::needs_grad({&input, &weight, &bias})) {
    const bool gx = input.requires_grad(), gw = weight.defined() && weight.requires_grad(),
               gb = bias.defined() && bias.requires_grad();
    autograd::record(op, {input, weight, bias}, result,
                     [op, gx, gw, gb, c, eps, in_shape = input.shape(), sx = SavedTensor(x), sm = SavedTensor(mean),
                      si = SavedTensor(invstd), sw = SavedTensor(w), sin = SavedTensor(input),
                      swg = SavedTensor(weight)](const Tensor& grad) {
                       if (grad_enabled()) {  // under create_graph: the formula with ops, recorded
                         const Shape cshape{1, c, 1, 1};
                         const std::vector<std::int64_t> dims{0, 2, 3};
                         auto grads = composed_norm_grads(grad, sin.get(),
                                                          swg.defined() ? swg.get().reshape(cshape) : Tensor(), eps,
                                                          dims, dims, gx, gw, gb);
                         // A 16-bit input's gradient in its dtype, the f32 weight's in f32.
                         const DType in_dt = sin.get().dtype(), p_dt = swg.defined() ? swg.get().dtype() : in_dt;
                         return std::vector<Tensor>{gx ? grads[0].to(in_dt) : Tensor(),
                                                    gw ? grads[1].reshape({c}).to(p_dt) : Tensor(),
                                                    gb ? grads[2].reshape({c}).to(p_dt) : Tensor()};
                       }
                       const Tensor &x = sx.get(), &mean = sm.get(), &invstd = si.get();
                       const Tensor g = grad.contiguous().reshape(x.shape());
                       Tensor sum_dy = detail::alloc({c}, mean.dtype(), x.device(), op);
                       Tensor sum_dy_xhat = detail::alloc({c}, mean.dtype(), x.device(), op);
                       detail::kernel<BatchNormBackwardReduceKernel>(op, x)(
                           detail::arg(sum_dy), detail::arg(sum_dy_xhat), detail::arg(g), detail::arg(x),
                           detail::arg(mean), detail::arg(invstd));
                       Tensor dx;
                       if (gx) {
                         dx = detail::alloc(x.shape(), x.dtype(), x.device(), op);
                         const Tensor w = sw.defined() ? sw.get() : Tensor();
                         detail::kernel<BatchNormBackwardKernel>(op, x)(
                             detail::arg(dx), detail::arg(g), detail::arg(x), detail::arg(mean), detail::arg(invstd),
                             optional_arg(w, mean), detail::arg(sum_dy), detail::arg(sum_dy_xhat));
                       }
                       return std::vector<Tensor>{gx ? dx.view(in_shape) : Tensor(), gw ? sum_dy_xhat : Tensor(),
                                                  gb ? sum_dy : Tensor()};
                     },
                     {}, autograd::Backward::differentiable);
  }
  return result;
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
  // A 16-bit input may come with f32 parameters and running statistics, as
  // autocast leaves them (PyTorch's mixed batch norm): the output keeps the
  // input's dtype, the statistics are f32.
  const std::int64_t c = input.shape()[1];
  check_param(op, "weight", input, weight, {c}, true);
  check_param(op, "bias", input, bias, {c}, true);
  check_param(op, "running_mean", input, running_mean, {c}, true);
  check_param(op, "running_var", input, running_var, {c}, true);
  if (running_mean.defined() != running_var.defined())
    throw Error("batch_norm2d: running_mean and running_var must both be given or both be undefined");
  bool mixed = false;
  for (const Tensor* p : {&weight, &bias, &running_mean, &running_var})
    if (p->defined() && p->dtype() != input.dtype()) mixed = true;
  auto widened = [](const Tensor& p) { return p.defined() ? p.to(DType::f32) : p; };  // recorded casts
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
    if (mixed) {  // the output in the input's dtype
      scale = scale.to(input.dtype());
      shift = shift.to(input.dtype());
    }
    return add(mul(input, scale.reshape(cshape)), shift.reshape(cshape));
  }

  const std::int64_t count = input.numel() / std::max<std::int64_t>(c, 1);
  if (count <= 1)
    throw ShapeError(fmt::format("batch_norm2d: expected more than 1 value per channel in training, got input {}",
                                 shape_str(input.shape())));
  if (detail::has_kernels<BatchNormStatsKernel, BatchNormForwardKernel, BatchNormBackwardReduceKernel,
                          BatchNormBackwardKernel>(input)) {
    if (is_16bit_float(input.dtype()))  // f32 statistics, weight and bias
      return fused_batch_norm2d(op, input, running_mean, running_var, widened(weight), widened(bias), momentum, eps);
    return fused_batch_norm2d(op, input, running_mean, running_var, weight, bias, momentum, eps);
  }
  // Mixed on a device without 16-bit kernels: in f32, the output cast back.
  if (mixed)
    return batch_norm2d(input.to(DType::f32), running_mean, running_var, widened(weight), widened(bias), true,
                        momentum, eps)
        .to(input.dtype());
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
                     [gx, gw, gb, dims, cshape, c, eps, sxh = SavedTensor(xhat), si = SavedTensor(invstd),
                      sw = SavedTensor(weight.defined() ? weight.detach() : Tensor()), sin = SavedTensor(input),
                      swg = SavedTensor(weight)](const Tensor& g) {
                       if (grad_enabled()) {  // under create_graph: the formula with ops, recorded
                         auto grads = composed_norm_grads(g, sin.get(),
                                                          swg.defined() ? swg.get().reshape(cshape) : Tensor(), eps,
                                                          dims, dims, gx, gw, gb);
                         return std::vector<Tensor>{grads[0], gw ? grads[1].reshape({c}) : Tensor(),
                                                    gb ? grads[2].reshape({c}) : Tensor()};
                       }
                       const Tensor& xh = sxh.get();
                       Tensor w = sw.defined() ? sw.get().reshape(cshape) : Tensor();
                       return std::vector<Tensor>{gx ? normalized_input_grad(g, xh, si.get(), w, dims) : Tensor(),
                                                  gw ? sum(mul(g, xh), dims).reshape({c}) : Tensor(),
                                                  gb ? sum(g, dims).reshape({c}) : Tensor()};
                     },
                     {}, autograd::Backward::differentiable);
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
  if (input.numel() > 0 && detail::has_kernels<LayerNormForwardKernel, LayerNormBackwardKernel>(input))
    return fused_layer_norm(op, input, normalized_shape, weight, bias, eps, d);
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
                     [gx, gw, gb, d, dims, eps, in_shape = input.shape(), normalized_shape, sxh = SavedTensor(xhat),
                      si = SavedTensor(invstd), sw = SavedTensor(weight.defined() ? weight.detach() : Tensor()),
                      sin = SavedTensor(input), swg = SavedTensor(weight)](const Tensor& grad) {
                       Tensor g = grad.reshape({-1, d});
                       if (grad_enabled()) {  // under create_graph: the formula with ops, recorded
                         auto grads = composed_norm_grads(g, sin.get().reshape({-1, d}),
                                                          swg.defined() ? swg.get().reshape({d}) : Tensor(), eps, dims,
                                                          {0}, gx, gw, gb);
                         return std::vector<Tensor>{gx ? grads[0].view(in_shape) : Tensor(),
                                                    gw ? grads[1].view(normalized_shape) : Tensor(),
                                                    gb ? grads[2].view(normalized_shape) : Tensor()};
                       }
                       const Tensor& xh = sxh.get();
                       Tensor w = sw.defined() ? sw.get().reshape({d}) : Tensor();
                       return std::vector<Tensor>{
                           gx ? normalized_input_grad(g, xh, si.get(), w, dims).view(in_shape) : Tensor(),
                           gw ? sum(mul(g, xh), {0}).view(normalized_shape) : Tensor(),
                           gb ? sum(g, {0}).view(normalized_shape) : Tensor()};
                     },
                     {}, autograd::Backward::differentiable);
  }
  return out;
}

Tensor batch_norm1d(const Tensor& input, const Tensor& running_mean, const Tensor& running_var, const Tensor& weight,
                    const Tensor& bias, bool training, double momentum, double eps) {
  detail::check_defined("batch_norm1d", input);
  if (input.dim() != 2 && input.dim() != 3)
    throw ShapeError(fmt::format("batch_norm1d: expected input of 2 dims [N, C] or 3 [N, C, L], got {}",
                                 shape_str(input.shape())));
  const Tensor x = input.dim() == 2 ? input.unsqueeze(2).unsqueeze(3) : input.unsqueeze(3);
  return batch_norm2d(x, running_mean, running_var, weight, bias, training, momentum, eps).reshape(input.shape());
}

Tensor group_norm(const Tensor& input, std::int64_t groups, const Tensor& weight, const Tensor& bias, double eps) {
  const char* op = "group_norm";
  detail::check_defined(op, input);
  if (input.dim() < 2)
    throw ShapeError(fmt::format("{}: expected input [N, C, *] of at least 2 dims, got {}", op, shape_str(input.shape())));
  const std::int64_t n = input.size(0), c = input.size(1);
  if (groups < 1 || c % groups != 0)
    throw ShapeError(fmt::format("{}: expected num_groups >= 1 dividing the {} channels, got {}", op, c, groups));
  for (const auto& [t, what] : {std::pair{&weight, "weight"}, {&bias, "bias"}})
    if (t->defined() && t->shape() != Shape{c})
      throw ShapeError(fmt::format("{}: expected {} of shape [{}], got {}", op, what, c, shape_str(t->shape())));
  const Tensor x = input.reshape({n, groups, -1});
  const Tensor centred = sub(x, mean(x, {2}, true));
  const Tensor var = mean(square(centred), {2}, true);  // biased, as PyTorch
  Tensor y = div(centred, sqrt(add(var, eps))).reshape(input.shape());
  Shape per_channel(std::size_t(input.dim()), 1);
  per_channel[1] = c;
  if (weight.defined()) y = mul(y, weight.reshape(per_channel));
  if (bias.defined()) y = add(y, bias.reshape(per_channel));
  return y;
}

}  // namespace rumus
