// Unary pointwise math (trigonometric, hyperbolic, error functions, other
// bases): one kernel forward, a backward of differentiable ops, so that
// create_graph differentiates it again. Formulas as PyTorch's derivatives.yaml.
#include "rumus/ops/pointwise_math.hpp"

#include <cmath>
#include <numbers>

#include "autocast.hpp"
#include "op_util.hpp"
#include "rumus/ops/compare.hpp"
#include "rumus/ops/creation.hpp"
#include "rumus/ops/elementwise.hpp"

namespace rumus {

using autograd::SavedTensor;

namespace {

enum class Saves { input, output };
using GradFn = Tensor (*)(const Tensor& g, const Tensor& saved);

// A floating result of `op` (integers compute in f32, as PyTorch promotes);
// the gradient reads either the input or the output, nothing else.
Tensor unary_math(const char* name, UnaryOp op, const Tensor& x_in, Saves saves, GradFn grad) {
  detail::check_defined(name, x_in);
  const Tensor x0 = detail::autocast(name, x_in)[0];
  const Tensor x = is_floating(x0.dtype()) ? x0 : x0.to(DType::f32);
  Tensor out = detail::unary_kernel(op, x, 0, 0, name);
  if (autograd::needs_grad({&x}))
    autograd::record(name, {x}, out,
                     [s = SavedTensor(saves == Saves::input ? x : out), grad](const Tensor& g) {
                       return std::vector<Tensor>{grad(g, s.get())};
                     },
                     {}, autograd::Backward::differentiable);
  return out;
}

constexpr double kTwoOverSqrtPi = 2.0 * std::numbers::inv_sqrtpi;

}  // namespace

Tensor sin(const Tensor& x) {
  return unary_math("sin", UnaryOp::sin, x, Saves::input, [](const Tensor& g, const Tensor& x) { return mul(g, cos(x)); });
}
Tensor cos(const Tensor& x) {
  return unary_math("cos", UnaryOp::cos, x, Saves::input,
                    [](const Tensor& g, const Tensor& x) { return mul(g, neg(sin(x))); });
}
Tensor tan(const Tensor& x) {  // 1 + tan^2
  return unary_math("tan", UnaryOp::tan, x, Saves::output,
                    [](const Tensor& g, const Tensor& y) { return mul(g, add(square(y), 1.0)); });
}
Tensor asin(const Tensor& x) {
  return unary_math("asin", UnaryOp::asin, x, Saves::input,
                    [](const Tensor& g, const Tensor& x) { return mul(g, rsqrt(sub(1.0, square(x)))); });
}
Tensor acos(const Tensor& x) {
  return unary_math("acos", UnaryOp::acos, x, Saves::input,
                    [](const Tensor& g, const Tensor& x) { return mul(g, neg(rsqrt(sub(1.0, square(x))))); });
}
Tensor atan(const Tensor& x) {
  return unary_math("atan", UnaryOp::atan, x, Saves::input,
                    [](const Tensor& g, const Tensor& x) { return div(g, add(square(x), 1.0)); });
}
Tensor sinh(const Tensor& x) {
  return unary_math("sinh", UnaryOp::sinh, x, Saves::input, [](const Tensor& g, const Tensor& x) { return mul(g, cosh(x)); });
}
Tensor cosh(const Tensor& x) {
  return unary_math("cosh", UnaryOp::cosh, x, Saves::input, [](const Tensor& g, const Tensor& x) { return mul(g, sinh(x)); });
}
Tensor asinh(const Tensor& x) {
  return unary_math("asinh", UnaryOp::asinh, x, Saves::input,
                    [](const Tensor& g, const Tensor& x) { return mul(g, rsqrt(add(square(x), 1.0))); });
}
Tensor acosh(const Tensor& x) {  // 1 / sqrt((x - 1)(x + 1))
  return unary_math("acosh", UnaryOp::acosh, x, Saves::input, [](const Tensor& g, const Tensor& x) {
    return mul(g, rsqrt(mul(sub(x, 1.0), add(x, 1.0))));
  });
}
Tensor atanh(const Tensor& x) {
  return unary_math("atanh", UnaryOp::atanh, x, Saves::input,
                    [](const Tensor& g, const Tensor& x) { return div(g, sub(1.0, square(x))); });
}
Tensor erf(const Tensor& x) {
  return unary_math("erf", UnaryOp::erf, x, Saves::input, [](const Tensor& g, const Tensor& x) {
    return mul(g, mul(exp(neg(square(x))), kTwoOverSqrtPi));
  });
}
Tensor erfc(const Tensor& x) {
  return unary_math("erfc", UnaryOp::erfc, x, Saves::input, [](const Tensor& g, const Tensor& x) {
    return mul(g, mul(exp(neg(square(x))), -kTwoOverSqrtPi));
  });
}
Tensor erfinv(const Tensor& x) {  // sqrt(pi) / 2 * exp(erfinv(x)^2)
  return unary_math("erfinv", UnaryOp::erfinv, x, Saves::output, [](const Tensor& g, const Tensor& y) {
    return mul(g, mul(exp(square(y)), 1.0 / kTwoOverSqrtPi));
  });
}
Tensor log1p(const Tensor& x) {
  return unary_math("log1p", UnaryOp::log1p, x, Saves::input,
                    [](const Tensor& g, const Tensor& x) { return div(g, add(x, 1.0)); });
}
Tensor expm1(const Tensor& x) {
  return unary_math("expm1", UnaryOp::expm1, x, Saves::output,
                    [](const Tensor& g, const Tensor& y) { return mul(g, add(y, 1.0)); });
}
Tensor log2(const Tensor& x) {
  return unary_math("log2", UnaryOp::log2, x, Saves::input,
                    [](const Tensor& g, const Tensor& x) { return div(g, mul(x, std::numbers::ln2)); });
}
Tensor log10(const Tensor& x) {
  return unary_math("log10", UnaryOp::log10, x, Saves::input,
                    [](const Tensor& g, const Tensor& x) { return div(g, mul(x, std::numbers::ln10)); });
}
Tensor exp2(const Tensor& x) {
  return unary_math("exp2", UnaryOp::exp2, x, Saves::output,
                    [](const Tensor& g, const Tensor& y) { return mul(g, mul(y, std::numbers::ln2)); });
}
Tensor reciprocal(const Tensor& x) {  // -1 / x^2 = -y^2
  return unary_math("reciprocal", UnaryOp::reciprocal, x, Saves::output,
                    [](const Tensor& g, const Tensor& y) { return mul(g, neg(square(y))); });
}
Tensor rsqrt(const Tensor& x) {  // -1/2 x^(-3/2) = -y^3 / 2
  return unary_math("rsqrt", UnaryOp::rsqrt, x, Saves::output,
                    [](const Tensor& g, const Tensor& y) { return mul(g, mul(pow(y, 3.0), -0.5)); });
}

Tensor sign(const Tensor& x) {
  detail::check_defined("sign", x);
  if (!is_floating(x.dtype())) {  // integers keep their dtype: (x > 0) - (x < 0)
    Tensor zero = zeros({}, {.dtype = x.dtype(), .device = x.device()});
    return sub(gt(x, zero).to(x.dtype()), lt(x, zero).to(x.dtype()));
  }
  // Piecewise constant: a zero gradient, recorded so that a graph through it stays whole.
  return unary_math("sign", UnaryOp::sign, x, Saves::input,
                    [](const Tensor& g, const Tensor&) { return zeros(g.shape(), {.dtype = g.dtype(), .device = g.device()}); });
}

Tensor logit(const Tensor& x0, std::optional<double> eps) {
  detail::check_defined("logit", x0);
  const Tensor x = is_floating(x0.dtype()) ? x0 : x0.to(DType::f32);
  const Tensor z = eps ? clamp(x, *eps, 1.0 - *eps) : x;
  return log(div(z, sub(1.0, z)));
}

Tensor frac(const Tensor& x) {
  detail::check_floating("frac", x);
  return sub(x, trunc(x));
}

Tensor Tensor::sin() const { return rumus::sin(*this); }
Tensor Tensor::cos() const { return rumus::cos(*this); }
Tensor Tensor::tan() const { return rumus::tan(*this); }
Tensor Tensor::asin() const { return rumus::asin(*this); }
Tensor Tensor::acos() const { return rumus::acos(*this); }
Tensor Tensor::atan() const { return rumus::atan(*this); }
Tensor Tensor::sinh() const { return rumus::sinh(*this); }
Tensor Tensor::cosh() const { return rumus::cosh(*this); }
Tensor Tensor::asinh() const { return rumus::asinh(*this); }
Tensor Tensor::acosh() const { return rumus::acosh(*this); }
Tensor Tensor::atanh() const { return rumus::atanh(*this); }
Tensor Tensor::erf() const { return rumus::erf(*this); }
Tensor Tensor::erfc() const { return rumus::erfc(*this); }
Tensor Tensor::erfinv() const { return rumus::erfinv(*this); }
Tensor Tensor::log1p() const { return rumus::log1p(*this); }
Tensor Tensor::expm1() const { return rumus::expm1(*this); }
Tensor Tensor::log2() const { return rumus::log2(*this); }
Tensor Tensor::log10() const { return rumus::log10(*this); }
Tensor Tensor::exp2() const { return rumus::exp2(*this); }
Tensor Tensor::sign() const { return rumus::sign(*this); }
Tensor Tensor::reciprocal() const { return rumus::reciprocal(*this); }
Tensor Tensor::rsqrt() const { return rumus::rsqrt(*this); }
Tensor Tensor::logit(std::optional<double> eps) const { return rumus::logit(*this, eps); }
Tensor Tensor::frac() const { return rumus::frac(*this); }

}  // namespace rumus
