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

}  // namespace rumus

RUMUS_API_END
