// Activations: forward with one unary kernel, backward with one fused gradient kernel.
#include "rumus/ops/activation.hpp"

#include <cmath>
#include <optional>

#include "op_util.hpp"
#include "../backend/pointwise.hpp"
#include "rumus/ops/compare.hpp"
#include "rumus/ops/elementwise.hpp"
#include "rumus/ops/pointwise_math.hpp"

namespace rumus {

using detail::arg;

namespace {
// The gradient with ops, for create_graph: `saved` is x, or y = f(x) for
// sigmoid and tanh. Nothing for the activations that have none yet.
std::optional<Tensor> composed_gradient(UnaryOp fwd, const Tensor& g, const Tensor& saved, double p0) {
  switch (fwd) {
    case UnaryOp::relu: return mul(g, gt(saved, 0.0).to(g.dtype()));
    case UnaryOp::leaky_relu: return where(gt(saved, 0.0), g, mul(g, p0));
    case UnaryOp::sigmoid: return mul(g, mul(saved, sub(1.0, saved)));
    case UnaryOp::tanh: return mul(g, sub(1.0, square(saved)));
    case UnaryOp::silu: {
      const Tensor s = sigmoid(saved);
      return mul(g, mul(s, add(mul(saved, sub(1.0, s)), 1.0)));
    }
    case UnaryOp::gelu: {  // Phi(x) + x phi(x)
      const Tensor cdf = mul(add(erf(mul(saved, M_SQRT1_2)), 1.0), 0.5);
      const Tensor pdf = mul(exp(mul(square(saved), -0.5)), 0.5 * M_2_SQRTPI * M_SQRT1_2);
      return mul(g, add(cdf, mul(saved, pdf)));
    }
    case UnaryOp::gelu_tanh: {  // 0.5 (1 + t) + 0.5 x (1 - t^2) du/dx, t = tanh(u), u = sqrt(2/pi) (x + 0.044715 x^3)
      constexpr double k = M_2_SQRTPI * M_SQRT1_2, c = 0.044715;
      const Tensor x2 = square(saved);
      const Tensor t = rumus::tanh(mul(mul(saved, add(mul(x2, c), 1.0)), k));
      const Tensor du = mul(add(mul(x2, 3.0 * c), 1.0), k);
      return mul(g, add(mul(add(t, 1.0), 0.5), mul(mul(mul(saved, 0.5), sub(1.0, square(t))), du)));
    }
    case UnaryOp::hardswish:  // 0 below -3, x / 3 + 1/2 up to 3 (inclusive, as PyTorch), 1 above
      return mul(g, where(lt(saved, -3.0), 0.0, where(le(saved, 3.0), add(div(saved, 3.0), 0.5), 1.0)));
    default: return std::nullopt;
  }
}

bool has_composed_gradient(UnaryOp fwd) {
  return fwd == UnaryOp::relu || fwd == UnaryOp::leaky_relu || fwd == UnaryOp::sigmoid || fwd == UnaryOp::tanh ||
         fwd == UnaryOp::silu || fwd == UnaryOp::gelu || fwd == UnaryOp::gelu_tanh || fwd == UnaryOp::hardswish;
}

// Records y = f(x): one fused gradient kernel, or under create_graph the same
// gradient with ops. `saved` is x, or the output y for sigmoid and tanh.
void record_activation(const char* name, UnaryOp fwd, BinaryOp bwd, const Tensor& x, Tensor& out,
                       const Tensor& saved, double p0) {
  autograd::record(
      name, {x}, out,
      [name, fwd, bwd, p0, s = autograd::SavedTensor(saved)](const Tensor& g) {
        if (grad_enabled()) return std::vector<Tensor>{*composed_gradient(fwd, g, s.get(), p0)};
        return std::vector<Tensor>{detail::binary_kernel(bwd, name, g, s.get(), g.dtype(), p0, 0)};
      },
      {}, has_composed_gradient(fwd) ? autograd::Backward::differentiable : autograd::Backward::once);
}

// `use_output`: the gradient reads y = f(x) instead of x.
Tensor activation(const char* name, UnaryOp fwd, BinaryOp bwd, const Tensor& x, bool use_output, double p0 = 0) {
  detail::check_floating(name, x);
  Tensor out = detail::unary_kernel(fwd, x, p0, 0);
  if (autograd::needs_grad({&x})) record_activation(name, fwd, bwd, x, out, use_output ? out : x, p0);
  return out;
}

// Whether `x` can take its own result: no other handle, view or saved copy
// shares its storage, and it is not a leaf whose gradient someone will read.
bool owned_temporary(const Tensor& x) {
  return x.defined() && x.impl_ptr().use_count() == 1 && x.storage_ptr().use_count() == 1 && x.is_contiguous() &&
         is_floating(x.dtype()) && !(x.requires_grad() && x.impl().recorded_on == std::thread::id{});
}

// The activation written over `x`; the gradient reads the output.
Tensor activation_in_place(const char* name, UnaryOp fwd, BinaryOp bwd, Tensor&& x) {
  Tensor out = x.detach();
  if (out.numel() > 0) detail::kernel<UnaryKernel>(name, out)(fwd, arg(out), arg(out), 0, 0);
  out.storage().bump_version();
  if (autograd::needs_grad({&x})) record_activation(name, fwd, bwd, x, out, out, 0);
  return out;
}
}  // namespace

Tensor relu(Tensor&& x) {
  if (!owned_temporary(x)) return relu(static_cast<const Tensor&>(x));
  return activation_in_place("relu", UnaryOp::relu, BinaryOp::relu_backward, std::move(x));
}
Tensor sigmoid(Tensor&& x) {
  if (!owned_temporary(x)) return sigmoid(static_cast<const Tensor&>(x));
  return activation_in_place("sigmoid", UnaryOp::sigmoid, BinaryOp::sigmoid_backward, std::move(x));
}
Tensor tanh(Tensor&& x) {
  if (!owned_temporary(x)) return rumus::tanh(static_cast<const Tensor&>(x));
  return activation_in_place("tanh", UnaryOp::tanh, BinaryOp::tanh_backward, std::move(x));
}

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

Tensor Tensor::relu() const& { return rumus::relu(*this); }
Tensor Tensor::sigmoid() const& { return rumus::sigmoid(*this); }
Tensor Tensor::tanh() const& { return rumus::tanh(*this); }
Tensor Tensor::relu() && { return rumus::relu(std::move(*this)); }
Tensor Tensor::sigmoid() && { return rumus::sigmoid(std::move(*this)); }
Tensor Tensor::tanh() && { return rumus::tanh(std::move(*this)); }

}  // namespace rumus
