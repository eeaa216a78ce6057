// Activations composed of differentiable ops (where, exp, log, clamp, ...):
// they run on every device and differentiate to any order without kernels
// of their own.
#include <limits>

#include "op_util.hpp"
#include "rumus/ops/activation.hpp"
#include "rumus/ops/compare.hpp"
#include "rumus/ops/elementwise.hpp"
#include "rumus/ops/join.hpp"
#include "rumus/ops/pointwise_math.hpp"

namespace rumus {

namespace {
constexpr double kUnbounded = std::numeric_limits<double>::quiet_NaN();  // clamp's open side

// exp(x) - 1 where x <= 0, read only there: the exponent is clamped at 0 so a
// large positive x (masked out by the caller) makes no inf whose gradient,
// multiplied by the mask's 0, would be NaN.
Tensor expm1_nonpositive(const Tensor& x) { return expm1(clamp(x, kUnbounded, 0.0)); }

// log(1 + exp(x)) without overflow: max(x, 0) + log1p(exp(-|x|)).
Tensor stable_softplus(const Tensor& x) { return add(relu(x), log1p(exp(neg(abs(x))))); }

// Under autocast expm1 and log1p compute in f32; the activation still
// answers in its input's dtype, as PyTorch's do.
Tensor like_input(const Tensor& y, const Tensor& x) { return y.dtype() == x.dtype() ? y : y.to(x.dtype()); }
}  // namespace

Tensor elu(const Tensor& x, double alpha) {
  detail::check_floating("elu", x);
  return like_input(where(gt(x, 0.0), x, mul(expm1_nonpositive(x), alpha)), x);
}

Tensor selu(const Tensor& x) {
  detail::check_floating("selu", x);
  constexpr double alpha = 1.6732632423543772848170429916717;
  constexpr double scale = 1.0507009873554804934193349852946;
  return like_input(mul(where(gt(x, 0.0), x, mul(expm1_nonpositive(x), alpha)), scale), x);
}

Tensor celu(const Tensor& x, double alpha) {
  detail::check_floating("celu", x);
  if (alpha == 0.0) throw ValueError("celu: expected a nonzero alpha, got 0");
  return like_input(where(gt(x, 0.0), x, mul(expm1_nonpositive(div(x, alpha)), alpha)), x);
}

Tensor softplus(const Tensor& x, double beta, double threshold) {
  detail::check_floating("softplus", x);
  Tensor bx = mul(x, beta);
  // Above the threshold the result is x itself (PyTorch's linear region).
  return like_input(where(gt(bx, threshold), x, div(stable_softplus(bx), beta)), x);
}

Tensor softsign(const Tensor& x) {
  detail::check_floating("softsign", x);
  return div(x, add(abs(x), 1.0));
}

Tensor mish(const Tensor& x) {
  detail::check_floating("mish", x);
  return mul(x, rumus::tanh(softplus(x)));
}

Tensor hardtanh(const Tensor& x, double min_val, double max_val) {
  detail::check_floating("hardtanh", x);
  if (min_val > max_val)
    throw ValueError(fmt::format("hardtanh: expected min_val <= max_val, got min_val {} and max_val {}", min_val,
                                 max_val));
  // The bounds as constants, so x's gradient is 1 strictly inside and 0 at and past them.
  return where(le(x, min_val), min_val, where(ge(x, max_val), max_val, x));
}

Tensor relu6(const Tensor& x) {
  detail::check_floating("relu6", x);
  return hardtanh(x, 0.0, 6.0);
}

Tensor hardsigmoid(const Tensor& x) {
  detail::check_floating("hardsigmoid", x);
  return div(hardtanh(add(x, 3.0), 0.0, 6.0), 6.0);
}

Tensor prelu(const Tensor& x, const Tensor& weight) {
  detail::check_defined("prelu", weight);
  detail::check_same_device("prelu", x, weight);
  detail::check_floating("prelu", x);
  detail::check_floating("prelu", weight);
  if (weight.dim() > 1)
    throw ShapeError(fmt::format("prelu: expected weight of one dim ([num_parameters]), got {}",
                                 shape_str(weight.shape())));
  const std::int64_t channels = x.dim() >= 2 ? x.shape()[1] : 1;
  Tensor w = weight.reshape({-1});
  if (w.numel() != 1 && w.numel() != channels)
    throw ShapeError(fmt::format("prelu: expected weight of 1 or {} elements (the input's channels, dim 1 of {}), "
                                 "got {}",
                                 channels, shape_str(x.shape()), w.numel()));
  if (w.numel() == 1) {
    w = w.reshape({});
  } else {
    Shape shape(std::size_t(x.dim()), 1);
    shape[1] = channels;
    w = w.reshape(shape);
  }
  return where(gt(x, 0.0), x, mul(x, w));
}

Tensor glu(const Tensor& x, std::int64_t dim) {
  detail::check_floating("glu", x);
  if (x.dim() == 0) throw ShapeError("glu: expected an input of at least one dim, got a 0-d tensor");
  const std::int64_t d = dim < 0 ? dim + x.dim() : dim;
  if (d < 0 || d >= x.dim())
    throw ShapeError(fmt::format("glu: dim {} is out of range for an input of shape {}", dim, shape_str(x.shape())));
  const std::int64_t n = x.shape()[std::size_t(d)];
  if (n % 2 != 0)
    throw ShapeError(fmt::format("glu: expected an even size along dim {} to halve, got {} (shape {})", dim, n,
                                 shape_str(x.shape())));
  std::vector<Tensor> halves = chunk(x, 2, d);
  return mul(halves[0], sigmoid(halves[1]));
}

Tensor logsigmoid(const Tensor& x) {
  detail::check_floating("logsigmoid", x);
  return like_input(neg(stable_softplus(neg(x))), x);
}

Tensor tanhshrink(const Tensor& x) {
  detail::check_floating("tanhshrink", x);
  return sub(x, rumus::tanh(x));
}

Tensor threshold(const Tensor& x, double threshold, double value) {
  detail::check_floating("threshold", x);
  return where(gt(x, threshold), x, value);
}

Tensor hardshrink(const Tensor& x, double lambd) {
  detail::check_floating("hardshrink", x);
  return where(gt(abs(x.detach()), lambd), x, 0.0);  // the mask records nothing
}

Tensor softshrink(const Tensor& x, double lambd) {
  detail::check_floating("softshrink", x);
  if (lambd < 0) throw ValueError(fmt::format("softshrink: expected lambd >= 0, got {}", lambd));
  return where(gt(x, lambd), sub(x, lambd), where(lt(x, -lambd), add(x, lambd), 0.0));
}

}  // namespace rumus
