#pragma once
#include "rumus/core/tensor.hpp"
#include "rumus/core/export.hpp"

RUMUS_API_BEGIN

namespace rumus {

Tensor relu(const Tensor& x);
Tensor sigmoid(const Tensor& x);
Tensor tanh(const Tensor& x);
// approximate = "none" (exact erf) or "tanh", as in PyTorch.
Tensor gelu(const Tensor& x, const std::string& approximate = "none");
Tensor leaky_relu(const Tensor& x, double negative_slope = 0.01);
Tensor silu(const Tensor& x);
// x * relu6(x + 3) / 6, as torch.nn.functional.hardswish.
Tensor hardswish(const Tensor& x);

}  // namespace rumus

RUMUS_API_END
