#include "rumus/ops/compare.hpp"

#include <cmath>
#include <limits>

#include "op_util.hpp"
#include "../backend/pointwise.hpp"
#include "rumus/ops/elementwise.hpp"
#include "rumus/ops/creation.hpp"
#include "rumus/ops/reduction.hpp"

namespace rumus {

namespace {
Tensor compare(BinaryOp op, const char* name, const Tensor& a, const Tensor& b) {
  detail::check_same_device(name, a, b);
  DType dt = detail::result_type(a, b);
  Tensor ca = a.dtype() == dt ? a.detach() : a.detach().to(dt);
  Tensor cb = b.dtype() == dt ? b.detach() : b.detach().to(dt);
  return detail::binary_kernel(op, name, ca, cb, DType::boolean);
}
// A number beside a tensor, as PyTorch wraps a Python scalar: it takes the
// tensor's dtype unless it is fractional (or not finite) beside an integer
// tensor, which then compares or selects in the default float dtype (f32),
// or it is an integer beside a bool tensor, which then compares or selects
// in the default integer dtype (i64: mask == 2 is false).
Tensor scalar_like(const Tensor& a, double v) {
  const bool integral = std::isfinite(v) && v == std::trunc(v);
  DType dt = is_floating(a.dtype()) || integral ? a.dtype() : DType::f32;
  if (dt == DType::boolean) dt = DType::i64;
  return full({}, v, {.dtype = dt, .device = a.device()});
}
}  // namespace

Tensor eq(const Tensor& a, const Tensor& b) { return compare(BinaryOp::eq, "eq", a, b); }
Tensor ne(const Tensor& a, const Tensor& b) { return compare(BinaryOp::ne, "ne", a, b); }
Tensor lt(const Tensor& a, const Tensor& b) { return compare(BinaryOp::lt, "lt", a, b); }
Tensor le(const Tensor& a, const Tensor& b) { return compare(BinaryOp::le, "le", a, b); }
Tensor gt(const Tensor& a, const Tensor& b) { return compare(BinaryOp::gt, "gt", a, b); }
Tensor ge(const Tensor& a, const Tensor& b) { return compare(BinaryOp::ge, "ge", a, b); }
Tensor eq(const Tensor& a, double b) { detail::check_defined("eq", a); return eq(a, scalar_like(a, b)); }
Tensor ne(const Tensor& a, double b) { detail::check_defined("ne", a); return ne(a, scalar_like(a, b)); }
Tensor lt(const Tensor& a, double b) { detail::check_defined("lt", a); return lt(a, scalar_like(a, b)); }
Tensor le(const Tensor& a, double b) { detail::check_defined("le", a); return le(a, scalar_like(a, b)); }
Tensor gt(const Tensor& a, double b) { detail::check_defined("gt", a); return gt(a, scalar_like(a, b)); }
Tensor ge(const Tensor& a, double b) { detail::check_defined("ge", a); return ge(a, scalar_like(a, b)); }

Tensor isnan(const Tensor& x) {
  detail::check_defined("isnan", x);
  if (!is_floating(x.dtype())) return zeros(x.shape(), {.dtype = DType::boolean, .device = x.device()});
  return ne(x, x);  // NaN is the one value unequal to itself
}
Tensor isinf(const Tensor& x) {
  detail::check_defined("isinf", x);
  if (!is_floating(x.dtype())) return zeros(x.shape(), {.dtype = DType::boolean, .device = x.device()});
  return eq(abs(x.detach()), std::numeric_limits<double>::infinity());
}
Tensor isfinite(const Tensor& x) {
  detail::check_defined("isfinite", x);
  if (!is_floating(x.dtype())) return ones(x.shape(), {.dtype = DType::boolean, .device = x.device()});
  Tensor d = x.detach();
  return eq(sub(d, d), 0.0);  // x - x is 0 when finite, NaN for inf and NaN
}

namespace {
// A tensor read as truth values: bool as it is, any other dtype nonzero.
Tensor truth(const char* op, const Tensor& x) {
  detail::check_defined(op, x);
  return x.dtype() == DType::boolean ? x.detach() : ne(x.detach(), 0.0);
}
void check_bool_operands(const char* op, const Tensor& a, const Tensor& b) {
  detail::check_defined(op, a);
  detail::check_defined(op, b);
  if (a.dtype() != DType::boolean || b.dtype() != DType::boolean)
    throw DTypeError(fmt::format("{}: expected bool tensors (bitwise operations on integers are not implemented), "
                                 "got {} and {}",
                                 op, dtype_name(a.dtype()), dtype_name(b.dtype())));
}
}  // namespace

// On bool operands mul is and, add is or.
Tensor logical_and(const Tensor& a, const Tensor& b) {
  return mul(truth("logical_and", a), truth("logical_and", b));
}
Tensor logical_or(const Tensor& a, const Tensor& b) { return add(truth("logical_or", a), truth("logical_or", b)); }
Tensor logical_xor(const Tensor& a, const Tensor& b) { return ne(truth("logical_xor", a), truth("logical_xor", b)); }
Tensor logical_not(const Tensor& x) { return eq(truth("logical_not", x), 0.0); }

Tensor operator&(const Tensor& a, const Tensor& b) {
  check_bool_operands("bitwise_and", a, b);
  return logical_and(a, b);
}
Tensor operator|(const Tensor& a, const Tensor& b) {
  check_bool_operands("bitwise_or", a, b);
  return logical_or(a, b);
}
Tensor operator^(const Tensor& a, const Tensor& b) {
  check_bool_operands("bitwise_xor", a, b);
  return logical_xor(a, b);
}
Tensor operator~(const Tensor& x) {
  check_bool_operands("bitwise_not", x, x);
  return logical_not(x);
}

Tensor where(const Tensor& cond, const Tensor& a0, const Tensor& b0) {
  detail::check_same_device("where", cond, a0);
  detail::check_same_device("where", a0, b0);
  detail::check_mask("where", "condition", cond);
  DType dt = detail::result_type(a0, b0);
  Tensor a = a0.dtype() == dt ? a0 : a0.to(dt), b = b0.dtype() == dt ? b0 : b0.to(dt);
  Shape shape = broadcast_shapes(broadcast_shapes(cond.shape(), a.shape(), "where"), b.shape(), "where");
  Tensor out = detail::alloc(shape, dt, a.device());
  if (out.numel() > 0) {
    Layout lc = detail::broadcast_layout(cond, shape), la = detail::broadcast_layout(a, shape),
           lb = detail::broadcast_layout(b, shape);
    detail::kernel<WhereKernel>("where", a)(detail::arg(out), detail::arg(cond, lc), detail::arg(a, la), detail::arg(b, lb));
  }
  if (autograd::needs_grad({&a, &b}))
    autograd::record("where", {a, b}, out,
                     [c = autograd::SavedTensor(cond), sa = a.shape(), sb = b.shape()](const Tensor& g) {
                       Tensor z = zeros({}, {.dtype = g.dtype(), .device = g.device()});
                       return std::vector<Tensor>{sum_to(where(c.get(), g, z), sa), sum_to(where(c.get(), z, g), sb)};
                     },
                     {}, autograd::Backward::differentiable);
  return out;
}

Tensor where(const Tensor& cond, const Tensor& a, double b) {
  detail::check_defined("where", a);
  return where(cond, a, scalar_like(a, b));
}
Tensor where(const Tensor& cond, double a, const Tensor& b) {
  detail::check_defined("where", b);
  return where(cond, scalar_like(b, a), b);
}

Tensor masked_fill(const Tensor& x, const Tensor& mask, double value) {
  detail::check_defined("masked_fill", x);
  detail::check_same_device("masked_fill", mask, x);
  detail::check_mask("masked_fill", "mask", mask);
  Shape out = broadcast_shapes(x.shape(), mask.shape(), "masked_fill");
  if (out != x.shape())
    throw ShapeError(fmt::format("masked_fill: mask of shape {} must broadcast to the input's shape {}",
                                 shape_str(mask.shape()), shape_str(x.shape())));
  // The input's dtype is kept even for a fractional value, as in PyTorch.
  return where(mask, full({}, value, {.dtype = x.dtype(), .device = x.device()}), x);
}
Tensor Tensor::masked_fill(const Tensor& mask, double value) const { return rumus::masked_fill(*this, mask, value); }

Tensor Tensor::eq(const Tensor& o) const { return rumus::eq(*this, o); }
Tensor Tensor::ne(const Tensor& o) const { return rumus::ne(*this, o); }
Tensor Tensor::lt(const Tensor& o) const { return rumus::lt(*this, o); }
Tensor Tensor::le(const Tensor& o) const { return rumus::le(*this, o); }
Tensor Tensor::gt(const Tensor& o) const { return rumus::gt(*this, o); }
Tensor Tensor::ge(const Tensor& o) const { return rumus::ge(*this, o); }
Tensor Tensor::eq(double o) const { return rumus::eq(*this, o); }
Tensor Tensor::ne(double o) const { return rumus::ne(*this, o); }
Tensor Tensor::lt(double o) const { return rumus::lt(*this, o); }
Tensor Tensor::le(double o) const { return rumus::le(*this, o); }
Tensor Tensor::gt(double o) const { return rumus::gt(*this, o); }
Tensor Tensor::ge(double o) const { return rumus::ge(*this, o); }
Tensor Tensor::logical_and(const Tensor& o) const { return rumus::logical_and(*this, o); }
Tensor Tensor::logical_or(const Tensor& o) const { return rumus::logical_or(*this, o); }
Tensor Tensor::logical_xor(const Tensor& o) const { return rumus::logical_xor(*this, o); }
Tensor Tensor::logical_not() const { return rumus::logical_not(*this); }
Tensor Tensor::isnan() const { return rumus::isnan(*this); }
Tensor Tensor::isinf() const { return rumus::isinf(*this); }
Tensor Tensor::isfinite() const { return rumus::isfinite(*this); }

}  // namespace rumus
