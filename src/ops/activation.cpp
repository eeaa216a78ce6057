// Activations: forward with one unary kernel, backward with one fused gradient kernel.
#include "rumus/ops/activation.hpp"

#include "op_util.hpp"

namespace rumus {

namespace {
// `use_output`: the gradient kernel reads y = f(x) instead of x.
Tensor activation(const char* name, UnaryOp fwd, BinaryOp bwd, const Tensor& x, bool use_output, double p0 = 0) {
  detail::check_floating(name, x);
  Tensor out = detail::unary_kernel(fwd, x, p0, 0);
  if (autograd::needs_grad({&x}))
    autograd::record(name, {x}, out,
                     [name, bwd, p0, saved = autograd::SavedTensor(use_output ? out.detach() : x)](const Tensor& g) {
                       return std::vector<Tensor>{detail::binary_kernel(bwd, name, g, saved.get(), g.dtype(), p0, 0)};
                     });
  return out;
}
}  // namespace

Tensor relu(const Tensor& x) { return activation("relu", UnaryOp::relu, BinaryOp::relu_backward, x, false); }
Tensor sigmoid(const Tensor& x) {
  return activation("sigmoid", UnaryOp::sigmoid, BinaryOp::sigmoid_backward, x, true);
}
Tensor tanh(const Tensor& x) { return activation("tanh", UnaryOp::tanh, BinaryOp::tanh_backward, x, true); }
Tensor gelu(const Tensor& x, const std::string& approximate) {
  if (approximate == "none") return activation("gelu", UnaryOp::gelu, BinaryOp::gelu_backward, x, false);
  if (approximate == "tanh")
    return activation("gelu", UnaryOp::gelu_tanh, BinaryOp::gelu_tanh_backward, x, false);
  throw Error("gelu: approximate must be \"none\" or \"tanh\", got \"" + approximate + "\"");
}
Tensor leaky_relu(const Tensor& x, double slope) {
  return activation("leaky_relu", UnaryOp::leaky_relu, BinaryOp::leaky_relu_backward, x, false, slope);
}
Tensor silu(const Tensor& x) { return activation("silu", UnaryOp::silu, BinaryOp::silu_backward, x, false); }
Tensor hardswish(const Tensor& x) {
  return activation("hardswish", UnaryOp::hardswish, BinaryOp::hardswish_backward, x, false);
}

Tensor Tensor::relu() const { return rumus::relu(*this); }
Tensor Tensor::sigmoid() const { return rumus::sigmoid(*this); }
Tensor Tensor::tanh() const { return rumus::tanh(*this); }

}  // namespace rumus
