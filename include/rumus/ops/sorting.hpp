#pragma once
// Sorting along one dim, as PyTorch's sort, argsort, topk and kthvalue.
// rumus's sort is always stable (equal values keep their order, which
// PyTorch's `stable = true` asks for and its default allows) and puts NaN
// above every number, as PyTorch does. Values are differentiable (a gather
// at the indices, so to any order); indices are i64.
#include <cstdint>
#include <optional>
#include <tuple>

#include "rumus/core/tensor.hpp"
#include "rumus/core/export.hpp"

RUMUS_API_BEGIN

namespace rumus {

// torch.sort: (values, indices) of x sorted along dim.
std::tuple<Tensor, Tensor> sort(const Tensor& x, std::int64_t dim = -1, bool descending = false);
// torch.sort(x, stable, dim, descending): the same (every sort here is stable).
std::tuple<Tensor, Tensor> sort(const Tensor& x, std::optional<bool> stable, std::int64_t dim, bool descending = false);

// torch.argsort: sort's indices.
Tensor argsort(const Tensor& x, std::int64_t dim = -1, bool descending = false);
Tensor argsort(const Tensor& x, bool stable, std::int64_t dim, bool descending = false);

// torch.topk: the k largest (smallest with largest = false) along dim, in
// order (`sorted` is accepted; they always come sorted); ties by position.
std::tuple<Tensor, Tensor> topk(const Tensor& x, std::int64_t k, std::int64_t dim = -1, bool largest = true,
                                bool sorted = true);

// torch.kthvalue: the k-th smallest (k from 1) along dim and its index.
std::tuple<Tensor, Tensor> kthvalue(const Tensor& x, std::int64_t k, std::int64_t dim = -1, bool keepdim = false);

// torch.median: the lower of the two middle values along dim (the element at
// (n - 1) / 2 in sorted order) and its index; a row holding NaN gives its
// first NaN, as PyTorch's. Without dim, the median of every element.
std::tuple<Tensor, Tensor> median(const Tensor& x, std::int64_t dim, bool keepdim = false);
Tensor median(const Tensor& x);

}  // namespace rumus

RUMUS_API_END
