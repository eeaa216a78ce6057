#pragma once
#include <cstdint>

#include "rumus/core/tensor.hpp"
#include "rumus/core/export.hpp"

RUMUS_API_BEGIN

namespace rumus {

// torch.gather: out[i][j][k] = input[i][index[i][j][k]][k] for dim 1 (any rank,
// any dim). index is i64 of input's rank, each of its sizes at most input's
// off `dim`; out is shaped as index. Differentiable in input.
Tensor gather(const Tensor& input, std::int64_t dim, const Tensor& index);

// torch.scatter_add: a copy of self with self[i][index[i][j][k]][k] += src[i][j][k]
// for dim 1 (repeated indices add up). index is i64 of self's rank, each of
// its sizes at most src's, and at most self's off `dim`; src's elements past
// index's extents are not used. Differentiable in self and src.
Tensor scatter_add(const Tensor& self, std::int64_t dim, const Tensor& index, const Tensor& src);

}  // namespace rumus

RUMUS_API_END
