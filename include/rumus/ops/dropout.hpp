#pragma once
#include "rumus/core/generator.hpp"
#include "rumus/core/tensor.hpp"
#include "rumus/core/export.hpp"

RUMUS_API_BEGIN

namespace rumus {

// Inverted dropout: zeroes with probability p and scales survivors by 1/(1-p);
// identity when !training or p == 0. A fresh mask every call.
Tensor dropout(const Tensor& input, double p, bool training, Generator* generator = nullptr);

}  // namespace rumus

RUMUS_API_END
