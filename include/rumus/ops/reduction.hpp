#pragma once
#include <tuple>
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
// (values, indices) along `dim`, as libtorch's torch::max(x, dim): auto [v, i] = max(x, 1).
// The gradient goes to the element the index names.
std::tuple<Tensor, Tensor> max(const Tensor& x, std::int64_t dim, bool keepdim = false);
std::tuple<Tensor, Tensor> min(const Tensor& x, std::int64_t dim, bool keepdim = false);
// Values only, over any dims (empty = all); the gradient splits among ties.
Tensor amax(const Tensor& x, const std::vector<std::int64_t>& dims, bool keepdim = false);
Tensor amin(const Tensor& x, const std::vector<std::int64_t>& dims, bool keepdim = false);
Tensor argmax(const Tensor& x, std::int64_t dim, bool keepdim = false);  // i64
Tensor argmin(const Tensor& x, std::int64_t dim, bool keepdim = false);
Tensor argmax(const Tensor& x);  // over the flattened tensor

// Sums `grad` down to `shape` (undoes broadcasting).
Tensor sum_to(const Tensor& grad, const Shape& shape);

}  // namespace rumus

RUMUS_API_END
