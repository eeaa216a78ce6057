#pragma once
#include <vector>

#include "rumus/core/tensor.hpp"
#include "rumus/core/export.hpp"

RUMUS_API_BEGIN

namespace rumus {

// Empty `dims` reduces over every dim.
Tensor sum(const Tensor& x, const std::vector<std::int64_t>& dims = {}, bool keepdim = false);
Tensor mean(const Tensor& x, const std::vector<std::int64_t>& dims = {}, bool keepdim = false);
Tensor max(const Tensor& x);
Tensor min(const Tensor& x);
Tensor max(const Tensor& x, std::int64_t dim, bool keepdim = false);  // values; see argmax for indices
Tensor min(const Tensor& x, std::int64_t dim, bool keepdim = false);
Tensor argmax(const Tensor& x, std::int64_t dim, bool keepdim = false);  // i64
Tensor argmin(const Tensor& x, std::int64_t dim, bool keepdim = false);
Tensor argmax(const Tensor& x);  // over the flattened tensor

// Sums `grad` down to `shape` (undoes broadcasting).
Tensor sum_to(const Tensor& grad, const Shape& shape);

}  // namespace rumus

RUMUS_API_END
