#include "rumus/ops/optimizer_step.hpp"

#include "op_util.hpp"

namespace rumus {

using detail::arg;

namespace {
void check_state(const char* op, const Tensor& param, const Tensor& other, const char* what) {
  detail::check_same_device(op, param, other);
  if (other.shape() != param.shape())
    throw ShapeError(fmt::format("{}: {} shape {} differs from parameter shape {}", op, what,
                                 shape_str(other.shape()), shape_str(param.shape())));
  if (other.dtype() != param.dtype())
    throw DTypeError(fmt::format("{}: {} dtype {} differs from parameter dtype {}", op, what,
                                 dtype_name(other.dtype()), dtype_name(param.dtype())));
}
void check_scalars(const char* op, const Tensor& param, const Tensor& s) {
  if (!s.defined()) return;
  detail::check_same_device(op, param, s);
  if (s.dtype() != DType::f32 || s.numel() != 4 || !s.is_contiguous())
    throw ShapeError(fmt::format("{}: expected scalars to be a contiguous f32 tensor of 4 elements, got {} {}", op,
                                 dtype_name(s.dtype()), shape_str(s.shape())));
}
TensorArg scalars_arg(const Tensor& s) { return s.defined() ? arg(s) : TensorArg{nullptr, DType::f32, nullptr}; }
// Gradients may arrive as broadcast or strided views; the fused kernels read them densely.
Tensor dense(const Tensor& t) { return t.detach().contiguous(); }
}  // namespace

void sgd_step_(Tensor& param, const Tensor& grad, Tensor& buf, const SgdStep& o) {
  detail::check_floating("sgd_step_", param);
  check_state("sgd_step_", param, grad, "gradient");
  const bool uses_buffer = o.momentum != 0;
  if (uses_buffer) check_state("sgd_step_", param, buf, "momentum buffer");
  check_scalars("sgd_step_", param, o.scalars);
  Tensor g = dense(grad);
  Tensor b = uses_buffer ? buf : param;  // a placeholder operand when there is no momentum
  detail::kernels("sgd_step_", Kernel::sgd_step, param)
      .sgd_step(SgdKernelArgs{o.lr, o.momentum, o.dampening, o.weight_decay, o.nesterov, o.first, scalars_arg(o.scalars)},
                arg(param), arg(g), arg(b));
  param.storage().bump_version();
  if (uses_buffer) buf.storage().bump_version();
}

void adam_step_(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, const AdamStep& o) {
  detail::check_floating("adam_step_", param);
  check_state("adam_step_", param, grad, "gradient");
  check_state("adam_step_", param, m, "exp_avg");
  check_state("adam_step_", param, v, "exp_avg_sq");
  if (o.step < 1) throw Error(fmt::format("adam_step_: expected step >= 1, got {}", o.step));
  check_scalars("adam_step_", param, o.scalars);
  Tensor g = dense(grad);
  detail::kernels("adam_step_", Kernel::adam_step, param)
      .adam_step(AdamKernelArgs{o.lr, o.beta1, o.beta2, o.eps, o.weight_decay, o.decoupled, o.step, scalars_arg(o.scalars)},
                                                                 arg(param), arg(g), arg(m), arg(v));
  for (Tensor* t : {&param, &m, &v}) t->storage().bump_version();
}

}  // namespace rumus
