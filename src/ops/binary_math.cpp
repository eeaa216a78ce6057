// Binary pointwise math composed of existing kernels (every device runs it);
// the gradients are those of derivatives.yaml, written with differentiable ops.
#include <cmath>
#include <numbers>

#include "op_util.hpp"
#include "rumus/ops/compare.hpp"
#include "rumus/ops/creation.hpp"
#include "rumus/ops/elementwise.hpp"
#include "rumus/ops/pointwise_math.hpp"
#include "rumus/ops/reduction.hpp"

namespace rumus {

using autograd::SavedTensor;

namespace {

// Both operands on one device in their common dtype, floating (integers become f32).
std::pair<Tensor, Tensor> floating_pair(const char* op, const Tensor& a, const Tensor& b) {
  detail::check_defined(op, a);
  detail::check_defined(op, b);
  detail::check_same_device(op, a, b);
  DType dt = detail::result_type(a, b);
  if (!is_floating(dt)) dt = DType::f32;
  return {a.dtype() == dt ? a : a.to(dt), b.dtype() == dt ? b : b.to(dt)};
}

Tensor scalar_like(double v, const Tensor& t) { return full({}, v, {.dtype = t.dtype(), .device = t.device()}); }

// A number operand: integer with an integer tensor and an integral number, else floating.
Tensor number_operand(const Tensor& a, double b) {
  const bool integral = !is_floating(a.dtype()) && b == std::trunc(b);
  return full({}, b, {.dtype = integral || is_floating(a.dtype()) ? a.dtype() : DType::f32, .device = a.device()});
}

// a - round(a / b) * b with round = trunc or floor; integers divide exactly.
Tensor remainder_of(const char* op, const Tensor& a, const Tensor& b, const char* rounding) {
  detail::check_defined(op, a);
  detail::check_defined(op, b);
  try {
    return sub(a, mul(div(a, b, rounding), b));
  } catch (const ValueError& e) {  // an integer zero divisor: name the op the user called
    throw ValueError(std::string(op) + ": " + e.what());
  }
}

}  // namespace

Tensor atan2(const Tensor& y0, const Tensor& x0) {
  auto [y, x] = floating_pair("atan2", y0, x0);
  Tensor out;
  {
    NoGradGuard no_grad;
    // atan(y / x) is the angle for x > 0 (and +-pi/2 for x = 0); for x < 0 it is off by pi.
    Tensor base = atan(div(y, x));
    Tensor turn = where(lt(x, 0.0), where(ge(y, 0.0), std::numbers::pi, scalar_like(-std::numbers::pi, y)), 0.0);
    out = where(mul(eq(x, 0.0), eq(y, 0.0)), 0.0, add(base, turn));
  }
  if (autograd::needs_grad({&y, &x})) {
    autograd::record("atan2", {y, x}, out, [sy = SavedTensor(y), sx = SavedTensor(x)](const Tensor& g) {
      const Tensor &y = sy.get(), &x = sx.get();
      Tensor r2 = add(square(x), square(y));
      return std::vector<Tensor>{sum_to(div(mul(g, x), r2), y.shape()), sum_to(neg(div(mul(g, y), r2)), x.shape())};
    }, {}, autograd::Backward::differentiable);
  }
  return out;
}

Tensor fmod(const Tensor& a, const Tensor& b) { return remainder_of("fmod", a, b, "trunc"); }
Tensor remainder(const Tensor& a, const Tensor& b) { return remainder_of("remainder", a, b, "floor"); }
Tensor fmod(const Tensor& a, double b) {
  detail::check_defined("fmod", a);
  return fmod(a, number_operand(a, b));
}
Tensor remainder(const Tensor& a, double b) {
  detail::check_defined("remainder", a);
  return remainder(a, number_operand(a, b));
}

Tensor lerp(const Tensor& start0, const Tensor& end0, const Tensor& weight0) {
  auto [start, end] = floating_pair("lerp", start0, end0);
  detail::check_defined("lerp", weight0);
  detail::check_same_device("lerp", start, weight0);
  const Tensor w = weight0.dtype() == start.dtype() ? weight0 : weight0.to(start.dtype());
  Tensor d = sub(end, start);
  // From weight 0.5 on, from the end: exact at weight 1.
  return where(lt(w, 0.5), add(start, mul(w, d)), sub(end, mul(d, sub(1.0, w))));
}

Tensor lerp(const Tensor& start, const Tensor& end, double weight) {
  detail::check_defined("lerp", start);
  return lerp(start, end, full({}, weight, {.dtype = is_floating(start.dtype()) ? start.dtype() : DType::f32,
                                            .device = start.device()}));
}

Tensor clamp(const Tensor& x, const std::optional<Tensor>& min, const std::optional<Tensor>& max) {
  detail::check_defined("clamp", x);
  if (!min && !max) throw ValueError("clamp: expected at least one of min and max, got neither");
  Tensor out = x;
  if (min) {
    detail::check_defined("clamp", *min);
    out = where(lt(out, *min), *min, out);
  }
  if (max) {
    detail::check_defined("clamp", *max);
    out = where(gt(out, *max), *max, out);
  }
  return out;
}

Tensor hypot(const Tensor& a0, const Tensor& b0) {
  auto [a, b] = floating_pair("hypot", a0, b0);
  return sqrt(add(square(a), square(b)));
}

Tensor xlogy(const Tensor& x0, const Tensor& y0) {
  auto [x, y] = floating_pair("xlogy", x0, y0);
  // log of 1 where x = 0, so that neither the value nor a gradient meets 0 * log(0).
  Tensor one = scalar_like(1.0, y);
  Tensor safe_y = where(mul(eq(x.detach(), 0.0), eq(isnan(y.detach()), 0.0)), one, y);
  return mul(x, log(safe_y));
}

namespace {
// -1 where b is negative or -0.0 (whose reciprocal is -inf), else 1: copysign's factor.
Tensor sign_factor(const Tensor& b, const Tensor& like) {
  Tensor negative = maximum(lt(b, 0.0), mul(eq(b, 0.0), lt(div(1.0, b), 0.0)));
  return where(negative, scalar_like(-1.0, like), scalar_like(1.0, like));
}
}  // namespace

Tensor copysign(const Tensor& a0, const Tensor& b0) {
  auto [a, b] = floating_pair("copysign", a0, b0);
  Tensor out;
  {
    NoGradGuard no_grad;
    out = mul(abs(a), sign_factor(b, a));
  }
  // As PyTorch: a's gradient is result / a (0 at a = 0), b's is zero.
  if (autograd::needs_grad({&a, &b}))
    autograd::record("copysign", {a, b}, out, [sa = SavedTensor(a), sb = SavedTensor(b)](const Tensor& g) {
      const Tensor &a = sa.get(), &b = sb.get();
      Tensor ga = mul(g, mul(sign(a), sign_factor(b.detach(), a)));
      return std::vector<Tensor>{sum_to(ga, a.shape()), zeros(b.shape(), {.dtype = b.dtype(), .device = b.device()})};
    }, {}, autograd::Backward::differentiable);
  return out;
}

Tensor Tensor::atan2(const Tensor& other) const { return rumus::atan2(*this, other); }
Tensor Tensor::fmod(const Tensor& other) const { return rumus::fmod(*this, other); }
Tensor Tensor::fmod(double other) const { return rumus::fmod(*this, other); }
Tensor Tensor::remainder(const Tensor& other) const { return rumus::remainder(*this, other); }
Tensor Tensor::remainder(double other) const { return rumus::remainder(*this, other); }
Tensor Tensor::lerp(const Tensor& end, const Tensor& weight) const { return rumus::lerp(*this, end, weight); }
Tensor Tensor::lerp(const Tensor& end, double weight) const { return rumus::lerp(*this, end, weight); }
Tensor Tensor::clamp(const std::optional<Tensor>& min, const std::optional<Tensor>& max) const {
  return rumus::clamp(*this, min, max);
}
Tensor Tensor::hypot(const Tensor& other) const { return rumus::hypot(*this, other); }
Tensor Tensor::xlogy(const Tensor& other) const { return rumus::xlogy(*this, other); }
Tensor Tensor::copysign(const Tensor& other) const { return rumus::copysign(*this, other); }

}  // namespace rumus
