#pragma once
#include <cstdint>
#include <optional>
#include <vector>

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

// torch.scatter: a copy of self with self[i][index[i][j][k]][k] = src[i][j][k]
// for dim 1 (index's rules as scatter_add's). Where an index repeats, which
// write wins is left open, as in PyTorch (rumus writes the sum of them).
// Differentiable in self (off the written places) and src (at index).
Tensor scatter(const Tensor& self, std::int64_t dim, const Tensor& index, const Tensor& src);
// The same with one value written at every indexed place.
Tensor scatter(const Tensor& self, std::int64_t dim, const Tensor& index, double value);

// torch.index_select: the entries index (1-D, i64 or i32) names along dim, in
// its order; out is input's shape with index's length at dim.
Tensor index_select(const Tensor& input, std::int64_t dim, const Tensor& index);

// torch.index_add: a copy of self with self.select(dim, index[i]) +=
// alpha * source.select(dim, i) (repeated indices add up). index is 1-D i64 or
// i32; source is self's shape with index's length at dim.
Tensor index_add(const Tensor& self, std::int64_t dim, const Tensor& index, const Tensor& source, double alpha = 1.0);

// torch.index_copy: a copy of self with self.select(dim, index[i]) =
// source.select(dim, i); index and source as index_add's. Where an index
// repeats, which write wins is left open, as in PyTorch (rumus writes the sum
// of them). Differentiable in self (off the written entries) and source.
Tensor index_copy(const Tensor& self, std::int64_t dim, const Tensor& index, const Tensor& source);

// torch.index_fill: a copy of self with every entry that index (1-D i64 or
// i32) names along dim set to value. Differentiable in self (off them).
Tensor index_fill(const Tensor& self, std::int64_t dim, const Tensor& index, double value);

// torch.masked_select: the elements of input where mask (bool or u8; input and mask
// broadcast together) is set, as a 1-D tensor in row-major order. The count
// is read back to the host (as PyTorch on a GPU does).
Tensor masked_select(const Tensor& input, const Tensor& mask);

// torch.nonzero: the i64 [count, input.dim()] indices of input's nonzero
// elements, row-major. Read back to the host (its size depends on the values).
Tensor nonzero(const Tensor& input);
// torch.nonzero(input, as_tuple=True) (libtorch's nonzero_numpy): the same
// indices as one 1-D i64 tensor per dim, a 0-d input read as 1-D.
std::vector<Tensor> nonzero_numpy(const Tensor& input);
// torch.where(condition) with the condition alone: nonzero_numpy(condition).
std::vector<Tensor> where(const Tensor& condition);

// torch.take_along_dim: gather along dim after input and indices broadcast off
// dim (same rank); without dim, both are flattened.
Tensor take_along_dim(const Tensor& input, const Tensor& indices, std::optional<std::int64_t> dim = std::nullopt);

}  // namespace rumus

RUMUS_API_END
