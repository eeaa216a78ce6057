#pragma once
#include <string>

#include "rumus/core/tensor.hpp"

namespace rumus {

enum class Reduction { none, mean, sum };

Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::mean);

}  // namespace rumus
