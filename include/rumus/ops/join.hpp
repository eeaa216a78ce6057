#pragma once
#include <vector>

#include "rumus/core/tensor.hpp"

namespace rumus {

Tensor cat(const std::vector<Tensor>& tensors, std::int64_t dim = 0);
Tensor stack(const std::vector<Tensor>& tensors, std::int64_t dim = 0);

}  // namespace rumus
