// Pointwise arithmetic with broadcasting; backward reduces gradients back to each input's shape.
#include "rumus/ops/elementwise.hpp"

#include <cmath>
#include <limits>

#include "op_util.hpp"
#include "../backend/pointwise.hpp"
#include "rumus/ops/compare.hpp"
#include "rumus/ops/creation.hpp"
#include "rumus/ops/reduction.hpp"

namespace rumus {

using autograd::SavedTensor;
using detail::arg;

namespace detail {

// out = op(a, b) with broadcasting and dtype promotion; no autograd.
Tensor binary_kernel(BinaryOp op, const char* name, const Tensor& a, const Tensor& b, DType out_dtype,
                     double p0, double p1) {
  Shape shape = broadcast_shapes(a.shape(), b.shape(), name);
  Tensor out = alloc(shape, out_dtype, a.device(), name);
  if (out.numel() == 0) return out;
  Layout la = broadcast_layout(a, shape), lb = broadcast_layout(b, shape);
  kernel<BinaryKernel>(name, a)(op, arg(out), arg(a, la), arg(b, lb), p0, p1);
  return out;
}

Tensor unary_kernel(UnaryOp op, const Tensor& x, double p0, double p1, const char* name) {
  Tensor out = alloc(x.shape(), x.dtype(), x.device(), name ? name : name_of(op).data());  // string literals
  if (out.numel() > 0) kernel<UnaryKernel>(name_of(op), x)(op, arg(out), arg(x), p0, p1);
  return out;
}

}  // namespace detail

namespace {

// Casts both operands to their common dtype (recorded when they require grad).
std::pair<Tensor, Tensor> promoted(const char* name, const Tensor& a, const Tensor& b) {
  detail::check_same_device(name, a, b);
  DType dt = detail::result_type(a, b);
  return {a.dtype() == dt ? a : a.to(dt), b.dtype() == dt ? b : b.to(dt)};
}

// What a unary op's gradient reads; it keeps only that alive, so that
// x * 2 neither holds x nor stops a later relu from writing over its result.
enum class Saves { nothing, input, output };

Tensor unary_float(const char* name, UnaryOp op, const Tensor& x, double p0, double p1, Saves saves,
                   std::function<Tensor(const Tensor& g, const Tensor& x, const Tensor& y)> grad) {
  detail::check_floating(name, x);
  Tensor out = detail::unary_kernel(op, x, p0, p1, name);
  if (autograd::needs_grad({&x}))
    autograd::record(name, {x}, out,
                     [sx = SavedTensor(saves == Saves::input ? x : Tensor()),
                      sy = SavedTensor(saves == Saves::output ? out : Tensor()), grad](const Tensor& g) {
                       return std::vector<Tensor>{grad(g, sx.get(), sy.get())};
                     },
                     {}, autograd::Backward::differentiable);
  return out;
}

}  // namespace

Tensor add(const Tensor& a0, const Tensor& b0, double alpha) {
  auto [a, b] = promoted("add", a0, b0);
  Tensor bb = alpha == 1.0 ? b : mul(b, alpha);
  Tensor out = detail::binary_kernel(BinaryOp::add, "add", a, bb, a.dtype());
  if (autograd::needs_grad({&a, &bb})) {
    Shape sa = a.shape(), sb = bb.shape();
    autograd::record("add", {a, bb}, out,
                     [sa, sb](const Tensor& g) { return std::vector<Tensor>{sum_to(g, sa), sum_to(g, sb)}; }, {},
                     autograd::Backward::differentiable);
  }
  return out;
}

// As in PyTorch, no subtraction with a bool operand (it is no mask operation).
void check_not_bool_sub(const Tensor& t) {
  if (t.dtype() == DType::boolean)
    throw DTypeError("sub: subtraction with a bool tensor is not supported (as in PyTorch); use logical_xor or ^, "
                     "or logical_not or ~ to invert a mask");
}

Tensor sub(const Tensor& a0, const Tensor& b0) {
  detail::check_defined("sub", a0);
  detail::check_defined("sub", b0);
  check_not_bool_sub(a0);
  check_not_bool_sub(b0);
  auto [a, b] = promoted("sub", a0, b0);
  Tensor out = detail::binary_kernel(BinaryOp::sub, "sub", a, b, a.dtype());
  if (autograd::needs_grad({&a, &b})) {
    Shape sa = a.shape(), sb = b.shape();
    autograd::record("sub", {a, b}, out,
                     [sa, sb](const Tensor& g) { return std::vector<Tensor>{sum_to(g, sa), sum_to(neg(g), sb)}; },
                     {}, autograd::Backward::differentiable);
  }
  return out;
}

Tensor mul(const Tensor& a0, const Tensor& b0) {
  auto [a, b] = promoted("mul", a0, b0);
  Tensor out = detail::binary_kernel(BinaryOp::mul, "mul", a, b, a.dtype());
  if (autograd::needs_grad({&a, &b})) {
    bool ga = a.requires_grad(), gb = b.requires_grad();
    // Save only what the other side's gradient needs.
    autograd::record("mul", {a, b}, out,
                     [sa = SavedTensor(gb ? a : Tensor()), sb = SavedTensor(ga ? b : Tensor()), ga, gb,
                      shape_a = a.shape(), shape_b = b.shape()](const Tensor& g) {
                       return std::vector<Tensor>{ga ? sum_to(mul(g, sb.get()), shape_a) : Tensor(),
                                                  gb ? sum_to(mul(g, sa.get()), shape_b) : Tensor()};
                     },
                     {}, autograd::Backward::differentiable);
  }
  return out;
}

// Integer division truncates (C++ semantics) and a zero divisor is a ValueError
// on every device, as PyTorch's CPU raises ZeroDivisionError: a zero would trap
// (SIGFPE) on the CPU and be undefined in a shader. Checking reads the divisor
// back to the host, a stall on a GPU, paid only by integer division.
// INT_MIN / -1 wraps to INT_MIN (two's complement), as in PyTorch.
static void check_int_divisor(const Tensor& b) {
  if (is_floating(b.dtype()) || b.numel() == 0) return;
  const auto v = b.to_vector<std::int64_t>();
  for (std::size_t i = 0; i < v.size(); ++i)
    if (v[i] == 0)
      throw ValueError(fmt::format("div: integer division by zero (divisor of dtype {} and shape {} is 0 at flat index {})",
                                   dtype_name(b.dtype()), shape_str(b.shape()), i));
}

Tensor div(const Tensor& a0, const Tensor& b0) {
  auto [a, b] = promoted("div", a0, b0);
  if (!is_floating(a.dtype())) {  // true division: integers divide as the default float
    a = a.to(DType::f32);
    b = b.to(DType::f32);
  }
  Tensor out = detail::binary_kernel(BinaryOp::div, "div", a, b, a.dtype());
  if (autograd::needs_grad({&a, &b})) {
    autograd::record("div", {a, b}, out, [sa = SavedTensor(a), sb = SavedTensor(b)](const Tensor& g) {
      const Tensor &x = sa.get(), &y = sb.get();
      Tensor ga = div(g, y);
      return std::vector<Tensor>{sum_to(ga, x.shape()), sum_to(neg(mul(ga, div(x, y))), y.shape())};
    }, {}, autograd::Backward::differentiable);
  }
  return out;
}

namespace {
// Gradient of maximum/minimum: the chosen side takes g, and at a tie each side
// takes g / 2, as PyTorch does (the subgradient that treats both alike).
std::vector<Tensor> extremum_pair_grad(const Tensor& g, const Tensor& a, const Tensor& b, bool is_max) {
  Tensor z = zeros({}, {.dtype = g.dtype(), .device = g.device()});
  Tensor a_wins = is_max ? gt(a, b) : lt(a, b);
  Tensor ga = where(a_wins, g, where(eq(a, b), mul(g, 0.5), z));
  Tensor gb = sub(g, ga);
  return {sum_to(ga, a.shape()), sum_to(gb, b.shape())};
}

Tensor extremum_pair(BinaryOp op, const char* name, bool is_max, const Tensor& a0, const Tensor& b0) {
  auto [a, b] = promoted(name, a0, b0);
  Tensor out = detail::binary_kernel(op, name, a, b, a.dtype());
  if (autograd::needs_grad({&a, &b}))
    autograd::record(name, {a, b}, out, [sa = SavedTensor(a), sb = SavedTensor(b), is_max](const Tensor& g) {
      return extremum_pair_grad(g, sa.get(), sb.get(), is_max);
    }, {}, autograd::Backward::differentiable);
  return out;
}
}  // namespace

Tensor maximum(const Tensor& a, const Tensor& b) { return extremum_pair(BinaryOp::maximum, "maximum", true, a, b); }
Tensor minimum(const Tensor& a, const Tensor& b) { return extremum_pair(BinaryOp::minimum, "minimum", false, a, b); }

Tensor pow(const Tensor& a0, const Tensor& b0) {
  auto [a, b] = promoted("pow", a0, b0);
  detail::check_floating("pow", a);
  Tensor out = detail::binary_kernel(BinaryOp::pow, "pow", a, b, a.dtype());
  if (autograd::needs_grad({&a, &b}))
    autograd::record("pow", {a, b}, out,
                     [sa = SavedTensor(a), sb = SavedTensor(b), so = SavedTensor(out)](const Tensor& g) {
                       const Tensor &x = sa.get(), &e = sb.get();
                       Tensor gx = mul(g, mul(e, pow(x, sub(e, 1.0))));
                       Tensor ge_ = mul(g, mul(so.get(), log(x)));
                       return std::vector<Tensor>{sum_to(gx, x.shape()), sum_to(ge_, e.shape())};
                     },
                     {}, autograd::Backward::differentiable);
  return out;
}

// Scalar operands: one unary kernel, no broadcast bookkeeping.
namespace {
// An integer tensor and a number: integer arithmetic with an integer number,
// the default float (f32) with a floating one, as PyTorch promotes. A bool
// tensor and an integer number compute in the default integer (i64).
bool integer_operands(const Tensor& a, const Scalar& b) { return !is_floating(a.dtype()) && b.is_integral(); }
Tensor number_like(const Scalar& b, const Tensor& a) {
  return full({}, b.to_double(),
              {.dtype = a.dtype() == DType::boolean ? DType::i64 : a.dtype(), .device = a.device()});
}
}  // namespace

Tensor add(const Tensor& a, Scalar b) {
  detail::check_defined("add", a);
  if (integer_operands(a, b)) return add(a, number_like(b, a));
  if (!is_floating(a.dtype())) return add(a.to(DType::f32), b);
  return unary_float("add", UnaryOp::add_scalar, a, b.to_double(), 0, Saves::nothing,
                     [](const Tensor& g, const Tensor&, const Tensor&) { return g; });
}
Tensor sub(const Tensor& a, Scalar b) {
  detail::check_defined("sub", a);
  check_not_bool_sub(a);
  return add(a, -b);
}
Tensor mul(const Tensor& a, Scalar b) {
  detail::check_defined("mul", a);
  if (integer_operands(a, b)) return mul(a, number_like(b, a));
  if (!is_floating(a.dtype())) return mul(a.to(DType::f32), b);
  const double v = b.to_double();
  return unary_float("mul", UnaryOp::mul_scalar, a, v, 0, Saves::nothing,
                     [v](const Tensor& g, const Tensor&, const Tensor&) { return mul(g, v); });
}
Tensor div(const Tensor& a, Scalar b) {
  detail::check_defined("div", a);
  if (!is_floating(a.dtype())) return div(a.to(DType::f32), b);
  return mul(a, 1.0 / b.to_double());
}

Tensor div(const Tensor& a0, const Tensor& b0, std::string_view rounding_mode) {
  const bool floor_mode = rounding_mode == "floor";
  if (!floor_mode && rounding_mode != "trunc")
    throw ValueError(fmt::format("div: expected rounding_mode \"trunc\" or \"floor\", got \"{}\"", rounding_mode));
  auto [a, b] = promoted("div", a0, b0);
  // The rounded quotient is piecewise constant: no gradient flows (PyTorch's is zero).
  if (is_floating(a.dtype())) {
    Tensor q = detail::binary_kernel(BinaryOp::div, "div", a, b, a.dtype());
    return floor_mode ? floor(q) : trunc(q);
  }
  check_int_divisor(b);
  Tensor q = detail::binary_kernel(BinaryOp::div, "div", a, b, a.dtype());  // integers: toward zero
  if (!floor_mode) return q;
  // Down instead of toward zero: one less where the division left a remainder of the divisor's opposite sign.
  Tensor r = sub(a, mul(q, b));
  Tensor zero = zeros({}, {.dtype = a.dtype(), .device = a.device()});
  Tensor adjust = mul(ne(r, zero), ne(lt(r, zero), lt(b, zero)));
  return sub(q, adjust.to(a.dtype()));
}

Tensor floor_divide(const Tensor& a, const Tensor& b) { return div(a, b, "floor"); }

Tensor Tensor::add(const Tensor& other, double alpha) const { return rumus::add(*this, other, alpha); }
Tensor Tensor::sub(const Tensor& other) const { return rumus::sub(*this, other); }
Tensor Tensor::mul(const Tensor& other) const { return rumus::mul(*this, other); }
Tensor Tensor::div(const Tensor& other) const { return rumus::div(*this, other); }

namespace {
// Rounding to integral values: integers unchanged, zero gradient.
Tensor rounded(const char* name, UnaryOp op, const Tensor& x) {
  detail::check_defined(name, x);
  if (!is_floating(x.dtype())) return x.clone();
  return unary_float(name, op, x, 0, 0, Saves::nothing, [](const Tensor& g, const Tensor&, const Tensor&) {
    return zeros(g.shape(), {.dtype = g.dtype(), .device = g.device()});
  });
}
}  // namespace

Tensor floor(const Tensor& x) { return rounded("floor", UnaryOp::floor, x); }
Tensor ceil(const Tensor& x) { return rounded("ceil", UnaryOp::ceil, x); }
Tensor trunc(const Tensor& x) { return rounded("trunc", UnaryOp::trunc, x); }
Tensor round(const Tensor& x) { return rounded("round", UnaryOp::round, x); }

Tensor pow(const Tensor& x, double e) {
  return unary_float("pow", UnaryOp::pow_scalar, x, e, 0, Saves::input,
                     [e](const Tensor& g, const Tensor& x, const Tensor&) { return mul(g, mul(pow(x, e - 1.0), e)); });
}

Tensor neg(const Tensor& x) {
  // Integers wrap as in PyTorch (u8 [1, 0, 200] -> [255, 0, 56]): 0 - x in the
  // tensor's own dtype. Not x * -1, whose -1 would saturate to 0 in u8.
  if (x.dtype() == DType::boolean)
    throw DTypeError("neg: negation of a bool tensor is not supported (as in PyTorch); use logical_not or ~");
  if (!is_floating(x.dtype())) return sub(0, x);
  return unary_float("neg", UnaryOp::neg, x, 0, 0, Saves::nothing,
                     [](const Tensor& g, const Tensor&, const Tensor&) { return neg(g); });
}
Tensor exp(const Tensor& x) {
  return unary_float("exp", UnaryOp::exp, x, 0, 0, Saves::output,
                     [](const Tensor& g, const Tensor&, const Tensor& y) { return mul(g, y); });
}
Tensor log(const Tensor& x) {
  return unary_float("log", UnaryOp::log, x, 0, 0, Saves::input,
                     [](const Tensor& g, const Tensor& x, const Tensor&) { return div(g, x); });
}
Tensor sqrt(const Tensor& x) {
  return unary_float("sqrt", UnaryOp::sqrt, x, 0, 0, Saves::output,
                     [](const Tensor& g, const Tensor&, const Tensor& y) { return div(mul(g, 0.5), y); });
}
Tensor square(const Tensor& x) {
  return unary_float("square", UnaryOp::square, x, 0, 0, Saves::input,
                     [](const Tensor& g, const Tensor& x, const Tensor&) { return mul(g, mul(x, 2.0)); });
}
Tensor abs(const Tensor& x) {
  detail::check_defined("abs", x);
  if (x.dtype() == DType::boolean) throw DTypeError("abs: not supported for bool tensors (as in PyTorch)");
  // Integers: exact, in their own dtype; the minimum wraps to itself (i8 -128), as in PyTorch.
  if (!is_floating(x.dtype())) return where(lt(x, 0.0), neg(x), x);
  return unary_float("abs", UnaryOp::abs, x, 0, 0, Saves::input, [](const Tensor& g, const Tensor& x, const Tensor&) {
    // Under create_graph: g * sign(x), whose sign is constant almost everywhere.
    if (grad_enabled()) return mul(g, detail::unary_kernel(UnaryOp::sign, x));
    return detail::binary_kernel(BinaryOp::abs_backward, "abs", g, x, g.dtype());
  });
}
Tensor clamp(const Tensor& x, double lo, double hi) {
  if (lo > hi) throw Error(fmt::format("clamp: expected min <= max, got min {} and max {}", lo, hi));
  detail::check_defined("clamp", x);
  if (x.dtype() == DType::boolean) throw DTypeError("clamp: not supported for bool tensors (as in PyTorch)");
  if (!is_floating(x.dtype())) {
    // Integer bounds keep an integer tensor's dtype (a bound past its range
    // saturates to the range); a fractional one clamps in the default float.
    auto integral_or_absent = [](double v) { return std::isinf(v) || v == std::trunc(v); };
    if (!integral_or_absent(lo) || !integral_or_absent(hi)) return clamp(x.to(DType::f32), lo, hi);
    Tensor y = x;
    if (std::isfinite(lo)) y = maximum(y, full({}, lo, {.dtype = x.dtype(), .device = x.device()}));
    if (std::isfinite(hi)) y = minimum(y, full({}, hi, {.dtype = x.dtype(), .device = x.device()}));
    return y.storage_ptr() == x.storage_ptr() ? x.clone() : y;
  }
  return unary_float("clamp", UnaryOp::clamp, x, lo, hi, Saves::input,
                     [lo, hi](const Tensor& g, const Tensor& x, const Tensor&) {
                       if (grad_enabled()) {  // under create_graph: g times the (constant) mask of the range
                         Tensor one = ones(g.shape(), {.dtype = g.dtype(), .device = g.device()});
                         return mul(g, detail::binary_kernel(BinaryOp::clamp_backward, "clamp", one, x, g.dtype(), lo, hi));
                       }
                       return detail::binary_kernel(BinaryOp::clamp_backward, "clamp", g, x, g.dtype(), lo, hi);
                     });
}

// A number on the left: number - x and number / x, as torch::rsub and torch::div(Scalar, Tensor).
Tensor sub(Scalar a, const Tensor& b) {
  detail::check_defined("sub", b);
  check_not_bool_sub(b);
  if (integer_operands(b, a)) return sub(number_like(a, b), b);
  if (!is_floating(b.dtype())) return sub(a, b.to(DType::f32));
  return add(neg(b), a);
}
Tensor div(Scalar a, const Tensor& b) {
  detail::check_defined("div", b);
  if (!is_floating(b.dtype())) return div(a, b.to(DType::f32));
  return mul(pow(b, -1.0), a);
}

Tensor Tensor::neg() const { return rumus::neg(*this); }
Tensor Tensor::exp() const { return rumus::exp(*this); }
Tensor Tensor::log() const { return rumus::log(*this); }
Tensor Tensor::sqrt() const { return rumus::sqrt(*this); }
Tensor Tensor::abs() const { return rumus::abs(*this); }
Tensor Tensor::square() const { return rumus::square(*this); }
Tensor Tensor::pow(double exponent) const { return rumus::pow(*this, exponent); }
Tensor Tensor::pow(const Tensor& exponent) const { return rumus::pow(*this, exponent); }
Tensor Tensor::clamp(double lo, double hi) const { return rumus::clamp(*this, lo, hi); }

}  // namespace rumus
