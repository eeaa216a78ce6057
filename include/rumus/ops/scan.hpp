#pragma once
// Prefix sums and products along one dim, as PyTorch's cumsum and cumprod.
#include <cstdint>
#include <optional>
#include <tuple>

#include "rumus/core/tensor.hpp"
#include "rumus/core/export.hpp"

RUMUS_API_BEGIN

namespace rumus {

// torch.cumsum: out[..., j, ...] = x[..., 0, ...] + ... + x[..., j, ...] along dim.
// Integer inputs give i64 (as PyTorch); `dtype` casts the input first.
// Differentiable to any order (the gradient is a reversed cumsum).
Tensor cumsum(const Tensor& x, std::int64_t dim, std::optional<DType> dtype = std::nullopt);
// torch.cumprod: the running product along dim, with cumsum's dtype rules.
// The gradient is right where x has zeros too (as PyTorch's), to any order.
Tensor cumprod(const Tensor& x, std::int64_t dim, std::optional<DType> dtype = std::nullopt);

// torch.cummax/cummin: (values, indices) of the running maximum (minimum)
// along dim; a later equal value takes over the index, and NaN is above
// every number, as PyTorch's. Values are differentiable (a gather at the
// indices, so to any order); indices are i64.
std::tuple<Tensor, Tensor> cummax(const Tensor& x, std::int64_t dim);
std::tuple<Tensor, Tensor> cummin(const Tensor& x, std::int64_t dim);

}  // namespace rumus

RUMUS_API_END
