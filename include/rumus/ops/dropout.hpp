#pragma once
#include "rumus/core/generator.hpp"
#include "rumus/core/tensor.hpp"
#include "rumus/core/export.hpp"

RUMUS_API_BEGIN

namespace rumus {

// Inverted dropout: zeroes with probability p and scales survivors by 1/(1-p);
// identity when !training or p == 0. A fresh mask every call.
Tensor dropout(const Tensor& input, double p, bool training, Generator* generator = nullptr);

// torch.nn.functional.dropout2d / dropout1d: zeroes whole channels (each
// sample's [H, W] or [L] plane) with probability p and scales the rest by
// 1/(1-p). Input [N, C, H, W] or unbatched [C, H, W] (dropout2d), [N, C, L]
// or [C, L] (dropout1d). The input times a mask: differentiable to any order.
Tensor dropout2d(const Tensor& input, double p = 0.5, bool training = true, Generator* generator = nullptr);
Tensor dropout1d(const Tensor& input, double p = 0.5, bool training = true, Generator* generator = nullptr);

}  // namespace rumus

RUMUS_API_END
