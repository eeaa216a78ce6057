// In-place writes. Each bumps the storage version so saved tensors notice.
#include "op_util.hpp"
#include "../backend/pointwise.hpp"
#include "rumus/ops/creation.hpp"

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

}  // namespace rumus
