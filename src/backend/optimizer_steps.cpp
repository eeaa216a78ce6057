// Default fused-optimizer kernels, composed from the elementwise kernels so
// every backend has them; a backend with a single fused kernel overrides them.
#include <cmath>
#include <memory>

#include "rumus/backend/backend.hpp"

namespace rumus {

namespace {

// A contiguous temporary shaped like `like`, on the backend's device.
struct Temp {
  Layout layout;
  std::unique_ptr<Storage> storage;
  DType dtype;
  Temp(Backend& be, TensorArg like)
      : layout(Layout::contiguous(like.layout->shape)),
        storage(std::make_unique<Storage>(be.device(), std::size_t(layout.numel()) * dtype_size(like.dtype))),
        dtype(like.dtype) {}
  TensorArg arg() { return {storage.get(), dtype, &layout}; }
};

// out = x * a + y * b, through one temporary.
void axpby(Backend& be, TensorArg out, TensorArg x, double a, TensorArg y, double b, Temp& tmp) {
  be.unary(UnaryOp::mul_scalar, tmp.arg(), y, b, 0);
  be.unary(UnaryOp::mul_scalar, out, x, a, 0);
  be.binary(BinaryOp::add, out, out, tmp.arg(), 0, 0);
}

}  // namespace

void Backend::sgd_step(const SgdStep& s, TensorArg param, TensorArg grad, TensorArg buf) {
  Temp g(*this, param), tmp(*this, param);
  if (s.weight_decay != 0) axpby(*this, g.arg(), grad, 1.0, param, s.weight_decay, tmp);
  else copy(g.arg(), grad);
  if (s.momentum != 0) {
    if (s.first) copy(buf, g.arg());
    else axpby(*this, buf, buf, s.momentum, g.arg(), 1.0 - s.dampening, tmp);
    if (s.nesterov) axpby(*this, g.arg(), g.arg(), 1.0, buf, s.momentum, tmp);
    else copy(g.arg(), buf);
  }
  axpby(*this, param, param, 1.0, g.arg(), -s.lr, tmp);
}

void Backend::adam_step(const AdamStep& s, TensorArg param, TensorArg grad, TensorArg m, TensorArg v) {
  Temp g(*this, param), tmp(*this, param);
  if (s.weight_decay != 0 && !s.decoupled) axpby(*this, g.arg(), grad, 1.0, param, s.weight_decay, tmp);
  else copy(g.arg(), grad);
  if (s.weight_decay != 0 && s.decoupled) unary(UnaryOp::mul_scalar, param, param, 1.0 - s.lr * s.weight_decay, 0);
  axpby(*this, m, m, s.beta1, g.arg(), 1.0 - s.beta1, tmp);
  unary(UnaryOp::square, g.arg(), g.arg(), 0, 0);
  axpby(*this, v, v, s.beta2, g.arg(), 1.0 - s.beta2, tmp);
  const double c1 = 1.0 - std::pow(s.beta1, double(s.step)), c2 = 1.0 - std::pow(s.beta2, double(s.step));
  // param -= lr / c1 * m / (sqrt(v / c2) + eps)
  unary(UnaryOp::mul_scalar, g.arg(), v, 1.0 / c2, 0);
  unary(UnaryOp::sqrt, g.arg(), g.arg(), 0, 0);
  unary(UnaryOp::add_scalar, g.arg(), g.arg(), s.eps, 0);
  binary(BinaryOp::div, g.arg(), m, g.arg(), 0, 0);
  axpby(*this, param, param, 1.0, g.arg(), -s.lr / c1, tmp);
}

void synchronize(Device device) { backend(device).synchronize(); }
DeviceStats device_stats(Device device) { return backend(device).stats(); }

}  // namespace rumus
