#pragma once
// The sort family: each row of a contiguous 2-D view [rows, n] sorted, the
// kernel of sort(), argsort(), topk(), kthvalue() (src/ops/sorting.cpp, which
// moves the sorted dim last). Stable: equal values keep their order; NaN
// sorts as the largest value (after every number ascending, first
// descending), as PyTorch's. values gets the sorted elements (in's dtype),
// indices (i64) their places in the row.
#include "kernel_registry.hpp"

namespace rumus {

struct SortKernel {
  static constexpr std::string_view name = "sort";
  using Fn = void(Backend&, TensorArg values, TensorArg indices, TensorArg in, bool descending);
};

// The first k elements of each row in the order the sort gives (largest:
// the descending one, ties and NaN alike), without ordering the rest: values
// and indices [rows, k], the kernel of topk(). Optional: where a device has
// none, topk() sorts the rows and keeps the first k.
struct TopkKernel {
  static constexpr std::string_view name = "topk";
  using Fn = void(Backend&, TensorArg values, TensorArg indices, TensorArg in, std::int64_t k, bool largest);
};

}  // namespace rumus
