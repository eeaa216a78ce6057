#pragma once
// Prefix sums and products along one dim, as PyTorch's cumsum and cumprod.
#include <cstdint>
#include <optional>

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

}  // namespace rumus

RUMUS_API_END
