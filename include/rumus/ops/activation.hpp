#pragma once
#include "rumus/core/tensor.hpp"
#include "rumus/core/export.hpp"

RUMUS_API_BEGIN

namespace rumus {

Tensor relu(const Tensor& x);
Tensor sigmoid(const Tensor& x);
Tensor tanh(const Tensor& x);
// Given a temporary that nothing else holds, as in relu(conv2d(x)), these
// write over it instead of allocating (torch's inplace=True without asking):
// their gradients read the output, so no value the backward pass needs is
// lost. Anything else still held (a named tensor, a view, a saved input) gets
// the out-of-place op.
Tensor relu(Tensor&& x);
Tensor sigmoid(Tensor&& x);
Tensor tanh(Tensor&& x);
// approximate = "none" (exact erf) or "tanh", as in PyTorch.
Tensor gelu(const Tensor& x, const std::string& approximate = "none");
Tensor leaky_relu(const Tensor& x, double negative_slope = 0.01);
Tensor silu(const Tensor& x);
// x * relu6(x + 3) / 6, as torch.nn.functional.hardswish.
Tensor hardswish(const Tensor& x);

// Composed of differentiable ops: both devices, gradients to any order.
// x for x > 0, alpha (exp(x) - 1) otherwise.
Tensor elu(const Tensor& x, double alpha = 1.0);
// scale * elu(x, alpha) with PyTorch's constants (alpha 1.6732..., scale 1.0507...).
Tensor selu(const Tensor& x);
// max(0, x) + min(0, alpha (exp(x / alpha) - 1)); alpha != 0.
Tensor celu(const Tensor& x, double alpha = 1.0);
// log(1 + exp(beta x)) / beta, and x itself where beta x > threshold.
Tensor softplus(const Tensor& x, double beta = 1.0, double threshold = 20.0);
Tensor softsign(const Tensor& x);  // x / (1 + |x|)
Tensor mish(const Tensor& x);      // x tanh(softplus(x))
// min(max(x, min_val), max_val); the gradient passes strictly inside, as PyTorch's.
Tensor hardtanh(const Tensor& x, double min_val = -1.0, double max_val = 1.0);
Tensor relu6(const Tensor& x);        // hardtanh(x, 0, 6)
Tensor hardsigmoid(const Tensor& x);  // relu6(x + 3) / 6
// max(0, x) + weight min(0, x); weight [1] or [C], C the input's dim 1.
Tensor prelu(const Tensor& x, const Tensor& weight);
// a * sigmoid(b), a and b the halves of x along dim.
Tensor glu(const Tensor& x, std::int64_t dim = -1);
Tensor logsigmoid(const Tensor& x);  // -softplus(-x)
Tensor tanhshrink(const Tensor& x);  // x - tanh(x)
// x where x > threshold, value elsewhere.
Tensor threshold(const Tensor& x, double threshold, double value);
// x where |x| > lambd, 0 elsewhere.
Tensor hardshrink(const Tensor& x, double lambd = 0.5);
// x - lambd above lambd, x + lambd below -lambd, 0 between.
Tensor softshrink(const Tensor& x, double lambd = 0.5);

}  // namespace rumus

RUMUS_API_END
