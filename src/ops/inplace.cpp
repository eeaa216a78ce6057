// In-place writes. Each bumps the storage version so saved tensors notice.
#include <limits>

#include "op_util.hpp"
#include "../backend/pointwise.hpp"
#include "rumus/ops/activation.hpp"
#include "rumus/ops/compare.hpp"
#include "rumus/ops/creation.hpp"
#include "rumus/ops/elementwise.hpp"
#include "rumus/ops/pointwise_math.hpp"

namespace rumus {

using detail::arg;

namespace {
void check_writable(const char* op, const Tensor& self) {
  if (self.requires_grad() && grad_enabled())
    throw AutogradError(fmt::format("{}: in-place write to a tensor that requires grad while recording; wrap it in "
                                    "NoGradGuard (as optimizers do) or use the out-of-place op",
                                    op));
}
// `src` as seen with self's shape, dtype and device.
Tensor prepared(const char* op, const Tensor& self, const Tensor& src) {
  detail::check_defined(op, src);
  Tensor s = src.detach();
  if (s.device() != self.device()) s = s.to(self.device());
  if (s.dtype() != self.dtype()) s = s.to(self.dtype());
  Shape b = broadcast_shapes(self.shape(), s.shape(), op);
  if (b != self.shape())
    throw ShapeError(fmt::format("{}: source shape {} does not broadcast to destination shape {}", op,
                                 shape_str(src.shape()), shape_str(self.shape())));
  return s;
}
}  // namespace

Tensor& Tensor::copy_(const Tensor& src) {
  check_writable("copy_", *this);
  Tensor s = prepared("copy_", *this, src);
  if (numel() > 0) {
    Layout l = detail::broadcast_layout(s, shape());
    detail::kernel<CopyKernel>("copy_", *this)(arg(*this), arg(s, l));
  }
  storage().bump_version();
  return *this;
}

Tensor& Tensor::fill_(double value) {
  check_writable("fill_", *this);
  if (numel() > 0) detail::kernel<FillKernel>("fill_", *this)(arg(*this), value);
  storage().bump_version();
  return *this;
}

Tensor& Tensor::zero_() { return fill_(0.0); }

Tensor& Tensor::add_(const Tensor& other, double alpha) {
  check_writable("add_", *this);
  Tensor s = prepared("add_", *this, other);
  if (alpha != 1.0) {
    NoGradGuard g;
    s = detail::unary_kernel(UnaryOp::mul_scalar, s, alpha);
  }
  if (numel() > 0) {
    Layout l = detail::broadcast_layout(s, shape());
    detail::kernel<BinaryKernel>("add_", *this)(BinaryOp::add, arg(*this), arg(*this), arg(s, l), 0, 0);
  }
  storage().bump_version();
  return *this;
}

Tensor& Tensor::add_(double value) {
  check_writable("add_", *this);
  if (numel() > 0) {
    if (is_floating(dtype()))
      detail::kernel<UnaryKernel>("add_", *this)(UnaryOp::add_scalar, arg(*this), arg(*this), value, 0);
    else
      return add_(full({}, value, {.dtype = dtype(), .device = device()}));
  }
  storage().bump_version();
  return *this;
}

Tensor& Tensor::mul_(const Tensor& other) {
  check_writable("mul_", *this);
  Tensor s = prepared("mul_", *this, other);
  if (numel() > 0) {
    Layout l = detail::broadcast_layout(s, shape());
    detail::kernel<BinaryKernel>("mul_", *this)(BinaryOp::mul, arg(*this), arg(*this), arg(s, l), 0, 0);
  }
  storage().bump_version();
  return *this;
}

Tensor& Tensor::mul_(double value) {
  check_writable("mul_", *this);
  if (numel() > 0) {
    if (is_floating(dtype()))
      detail::kernel<UnaryKernel>("mul_", *this)(UnaryOp::mul_scalar, arg(*this), arg(*this), value, 0);
    else
      return mul_(full({}, value, {.dtype = dtype(), .device = device()}));
  }
  storage().bump_version();
  return *this;
}

// ---- the in-place forms of pointwise ops ----

namespace {
constexpr double kInf = std::numeric_limits<double>::infinity();

// Writes op(self) into self, as PyTorch's in-place forms: the shape and the
// dtype stay self's.
template <class Fn>
Tensor& write_result(const char* op, Tensor& self, Fn&& fn) {
  check_writable(op, self);
  Tensor result;
  {
    NoGradGuard no_grad;
    result = fn(self.detach());
  }
  if (result.shape() != self.shape())
    throw ShapeError(fmt::format("{}: the result's shape {} (operands broadcast) differs from the destination's {}", op,
                                 shape_str(result.shape()), shape_str(self.shape())));
  if (is_floating(result.dtype()) && !is_floating(self.dtype()))
    throw DTypeError(fmt::format("{}: the result is {}, which cannot be written into a {} tensor in place", op,
                                 dtype_name(result.dtype()), dtype_name(self.dtype())));
  if (self.numel() > 0) detail::kernel<CopyKernel>(op, self)(arg(self), arg(result));
  self.storage().bump_version();
  return self;
}
}  // namespace

// (The free functions are named with rumus:: here: inside Tensor's members the
// unqualified names would find the member functions first.)
Tensor& Tensor::sub_(const Tensor& other, double alpha) {
  return write_result("sub_", *this, [&](const Tensor& x) { return rumus::add(x, other, -alpha); });
}
Tensor& Tensor::sub_(double value) { return write_result("sub_", *this, [&](const Tensor& x) { return rumus::sub(x, value); }); }
Tensor& Tensor::div_(const Tensor& other) {
  return write_result("div_", *this, [&](const Tensor& x) { return rumus::div(x, other); });
}
Tensor& Tensor::div_(double value) { return write_result("div_", *this, [&](const Tensor& x) { return rumus::div(x, value); }); }
Tensor& Tensor::pow_(double exponent) {
  return write_result("pow_", *this, [&](const Tensor& x) { return rumus::pow(x, exponent); });
}
Tensor& Tensor::pow_(const Tensor& exponent) {
  return write_result("pow_", *this, [&](const Tensor& x) { return rumus::pow(x, exponent); });
}
Tensor& Tensor::clamp_(double min, double max) {
  return write_result("clamp_", *this, [&](const Tensor& x) { return rumus::clamp(x, min, max); });
}
Tensor& Tensor::clamp_min_(double min) {
  return write_result("clamp_min_", *this, [&](const Tensor& x) { return rumus::clamp(x, min, kInf); });
}
Tensor& Tensor::clamp_max_(double max) {
  return write_result("clamp_max_", *this, [&](const Tensor& x) { return rumus::clamp(x, -kInf, max); });
}
Tensor& Tensor::masked_fill_(const Tensor& mask, double value) {
  return write_result("masked_fill_", *this, [&](const Tensor& x) { return rumus::masked_fill(x, mask, value); });
}
Tensor& Tensor::lerp_(const Tensor& end, double weight) {
  return write_result("lerp_", *this, [&](const Tensor& x) { return rumus::lerp(x, end, weight); });
}
Tensor& Tensor::lerp_(const Tensor& end, const Tensor& weight) {
  return write_result("lerp_", *this, [&](const Tensor& x) { return rumus::lerp(x, end, weight); });
}
Tensor& Tensor::neg_() { return write_result("neg_", *this, [](const Tensor& x) { return rumus::neg(x); }); }
Tensor& Tensor::abs_() { return write_result("abs_", *this, [](const Tensor& x) { return rumus::abs(x); }); }
Tensor& Tensor::exp_() { return write_result("exp_", *this, [](const Tensor& x) { return rumus::exp(x); }); }
Tensor& Tensor::log_() { return write_result("log_", *this, [](const Tensor& x) { return rumus::log(x); }); }
Tensor& Tensor::sqrt_() { return write_result("sqrt_", *this, [](const Tensor& x) { return rumus::sqrt(x); }); }
Tensor& Tensor::rsqrt_() { return write_result("rsqrt_", *this, [](const Tensor& x) { return rumus::rsqrt(x); }); }
Tensor& Tensor::reciprocal_() {
  return write_result("reciprocal_", *this, [](const Tensor& x) { return rumus::reciprocal(x); });
}
Tensor& Tensor::floor_() { return write_result("floor_", *this, [](const Tensor& x) { return rumus::floor(x); }); }
Tensor& Tensor::ceil_() { return write_result("ceil_", *this, [](const Tensor& x) { return rumus::ceil(x); }); }
Tensor& Tensor::round_() { return write_result("round_", *this, [](const Tensor& x) { return rumus::round(x); }); }
Tensor& Tensor::trunc_() { return write_result("trunc_", *this, [](const Tensor& x) { return rumus::trunc(x); }); }
Tensor& Tensor::relu_() { return write_result("relu_", *this, [](const Tensor& x) { return rumus::relu(x); }); }
Tensor& Tensor::sigmoid_() { return write_result("sigmoid_", *this, [](const Tensor& x) { return rumus::sigmoid(x); }); }
Tensor& Tensor::tanh_() { return write_result("tanh_", *this, [](const Tensor& x) { return rumus::tanh(x); }); }

}  // namespace rumus
