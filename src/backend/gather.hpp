#pragma once
// The gather family: per-element gathers and scatter-adds along the middle
// dim of contiguous 3-D views, the kernels of gather() and scatter_add()
// (src/ops/indexing.cpp, which flattens any rank and dim to these views).
//
// index is i64 [outer, m, inner], src (gather) or out (scatter_add) is
// [outer, n, inner], the other operand is [outer, m, inner]:
//   gather:      out[o, j, k] = src[o, index[o, j, k], k]
//   scatter_add: out[o, index[o, j, k], k] += src[o, j, k]
// CPU kernels take indices in range (ops check them first); GPU kernels skip
// an index outside [0, n) (zeros for gather), record it, and raise the error
// at the device's next wait, as index_select does.
#include "kernel_registry.hpp"

namespace rumus {

struct GatherKernel {
  static constexpr std::string_view name = "gather";
  using Fn = void(Backend&, TensorArg out, TensorArg src, TensorArg index);
};

struct ScatterAddKernel {
  static constexpr std::string_view name = "scatter_add";
  using Fn = void(Backend&, TensorArg out, TensorArg index, TensorArg src);
};

// Row gathers and scatters along the middle dim of contiguous 3-D views, the
// kernels of index_select(), index_add() and embedding: src/out are
// [outer, n, inner] and [outer, m, inner]; index is i64 [1 or outer, m] (one
// shared index row, or one row per outer slice).
//   index_select: out[o, j, k] = src[o, index[o', j], k]
//   index_add:    out[o, index[o', j], k] += src[o, j, k]  (out is [outer, n, inner])
// Out-of-range indices as above.
struct IndexSelectKernel {
  static constexpr std::string_view name = "index_select";
  using Fn = void(Backend&, TensorArg out, TensorArg src, TensorArg index);
};

struct IndexAddKernel {
  static constexpr std::string_view name = "index_add";
  using Fn = void(Backend&, TensorArg out, TensorArg index, TensorArg src);
};

}  // namespace rumus
