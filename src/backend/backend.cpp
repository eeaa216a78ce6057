// Names of the kernel codes, and the optimizer steps composed from the
// elementwise kernels for backends without a fused kernel of their own.
#include "backend.hpp"

#include <array>
#include <cmath>
#include <memory>

#include "rumus/core/error.hpp"

namespace rumus {

#define RUMUS_NAME_ENTRY(name) #name,
std::string_view name_of(UnaryOp op) {
  static constexpr std::array<std::string_view, kUnaryOpCount> names{RUMUS_UNARY_OPS(RUMUS_NAME_ENTRY)};
  return names[static_cast<int>(op)];
}
std::string_view name_of(BinaryOp op) {
  static constexpr std::array<std::string_view, kBinaryOpCount> names{RUMUS_BINARY_OPS(RUMUS_NAME_ENTRY)};
  return names[static_cast<int>(op)];
}
std::string_view name_of(ReduceOp op) {
  static constexpr std::array<std::string_view, kReduceOpCount> names{RUMUS_REDUCE_OPS(RUMUS_NAME_ENTRY)};
  return names[static_cast<int>(op)];
}
std::string_view name_of(Kernel kernel) {
  static constexpr std::array<std::string_view, kKernelCount> names{RUMUS_KERNELS(RUMUS_NAME_ENTRY)};
  return names[static_cast<int>(kernel)];
}
#undef RUMUS_NAME_ENTRY

std::int64_t head_slots(const Layout& l) {
  const Shape &n = l.shape, &s = l.strides;
  const std::int64_t b = n[0], h = n[1], len = n[2], w = n[3];
  if (b * h * len * w == 0) return 0;
  auto fits = [&](int dim, std::int64_t want) { return n[std::size_t(dim)] <= 1 || s[std::size_t(dim)] == want; };
  if (fits(3, 1) && fits(2, w) && fits(1, len * w) && fits(0, h * len * w)) return 0;
  // Rows `row` apart; a single row's distance shows only in the batch stride.
  const std::int64_t row = len > 1 ? s[2] : b > 1 ? s[0] : h * w;
  const bool side_by_side = fits(3, 1) && fits(1, w) && fits(2, row) && fits(0, len * row);
  return side_by_side && row >= h * w && row % w == 0 ? row / w : -1;
}

void Backend::layer_norm_forward(TensorArg, TensorArg, TensorArg, TensorArg, TensorArg, TensorArg, double) {
  throw DeviceError("layer_norm_forward: this backend has no kernel (ops compose the layer norm instead)");
}
void Backend::layer_norm_backward(TensorArg, TensorArg, TensorArg, TensorArg, TensorArg, TensorArg, TensorArg,
                                  TensorArg) {
  throw DeviceError("layer_norm_backward: this backend has no kernel (ops compose the layer norm instead)");
}
void Backend::dropout_forward(TensorArg, TensorArg, TensorArg, std::uint64_t, std::uint64_t, double, double) {
  throw DeviceError("dropout_forward: this backend has no kernel (ops draw the mask and multiply instead)");
}

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

void gemm_bias_by_copy(Backend& be, const GemmArgs& g) {
  GemmArgs product = g;
  product.bias = {nullptr, DType::f32, nullptr};
  // The bias along C's last dim, broadcast over the rows (and batches).
  Layout spread{g.c.layout->shape, Shape(g.c.layout->shape.size(), 0), g.bias.layout->offset};
  spread.strides.back() = g.bias.layout->strides.back();
  const TensorArg bias{g.bias.storage, g.bias.dtype, &spread};
  if (g.beta == 0) {
    be.copy(g.c, bias);
    product.beta = 1;
    be.gemm(product);
  } else {
    be.gemm(product);
    be.binary(BinaryOp::add, g.c, g.c, bias, 0, 0);
  }
}

void composed_sgd_step(Backend& be, const SgdKernelArgs& s, TensorArg param, TensorArg grad, TensorArg buf) {
  Temp g(be, param), tmp(be, param);
  if (s.weight_decay != 0) axpby(be, g.arg(), grad, 1.0, param, s.weight_decay, tmp);
  else be.copy(g.arg(), grad);
  if (s.momentum != 0) {
    if (s.first) be.copy(buf, g.arg());
    else axpby(be, buf, buf, s.momentum, g.arg(), 1.0 - s.dampening, tmp);
    if (s.nesterov) axpby(be, g.arg(), g.arg(), 1.0, buf, s.momentum, tmp);
    else be.copy(g.arg(), buf);
  }
  axpby(be, param, param, 1.0, g.arg(), -s.lr, tmp);
}

void composed_adam_step(Backend& be, const AdamKernelArgs& s, TensorArg param, TensorArg grad, TensorArg m,
                        TensorArg v) {
  Temp g(be, param), tmp(be, param);
  if (s.weight_decay != 0 && !s.decoupled) axpby(be, g.arg(), grad, 1.0, param, s.weight_decay, tmp);
  else be.copy(g.arg(), grad);
  if (s.weight_decay != 0 && s.decoupled) be.unary(UnaryOp::mul_scalar, param, param, 1.0 - s.lr * s.weight_decay, 0);
  axpby(be, m, m, s.beta1, g.arg(), 1.0 - s.beta1, tmp);
  be.unary(UnaryOp::square, g.arg(), g.arg(), 0, 0);
  axpby(be, v, v, s.beta2, g.arg(), 1.0 - s.beta2, tmp);
  const double c1 = 1.0 - std::pow(s.beta1, double(s.step)), c2 = 1.0 - std::pow(s.beta2, double(s.step));
  // param -= lr / c1 * m / (sqrt(v / c2) + eps)
  be.unary(UnaryOp::mul_scalar, g.arg(), v, 1.0 / c2, 0);
  be.unary(UnaryOp::sqrt, g.arg(), g.arg(), 0, 0);
  be.unary(UnaryOp::add_scalar, g.arg(), g.arg(), s.eps, 0);
  be.binary(BinaryOp::div, g.arg(), m, g.arg(), 0, 0);
  axpby(be, param, param, 1.0, g.arg(), -s.lr / c1, tmp);
}

}  // namespace rumus
