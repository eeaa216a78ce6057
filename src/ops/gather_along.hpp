#pragma once
#include <cstdint>
#include <vector>

#include "rumus/core/tensor.hpp"

namespace rumus::detail {

// x with dim `dim` replaced by x's slices at `index` (host positions): one
// gather with the index broadcast over the other dims, differentiable.
Tensor gather_along(const Tensor& x, std::int64_t dim, const std::vector<std::int64_t>& index);

}  // namespace rumus::detail
