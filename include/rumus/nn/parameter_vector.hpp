#pragma once
// torch.nn.utils.parameters_to_vector / vector_to_parameters: all parameters
// as one flat vector (for second-order methods, evolution strategies, EMA).
#include <vector>

#include "rumus/core/tensor.hpp"
#include "rumus/core/export.hpp"

RUMUS_API_BEGIN

namespace rumus::nn {

// The parameters flattened and concatenated in order (differentiable, as PyTorch's).
Tensor parameters_to_vector(const std::vector<Tensor>& parameters);
// Copies consecutive slices of `vec` into the parameters, in place; vec must be
// 1-D with exactly as many elements as the parameters together.
void vector_to_parameters(const Tensor& vec, const std::vector<Tensor>& parameters);

}  // namespace rumus::nn

RUMUS_API_END
