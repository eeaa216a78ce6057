#pragma once
// The scan family: inclusive prefix sums and products along the middle dim of
// contiguous 3-D views [outer, n, inner], the kernels of cumsum() and
// cumprod() (src/ops/scan.cpp, which flattens any rank and dim to these views):
//   out[o, j, k] = in[o, 0, k] (+ or *) ... in[o, j, k]
// out and in share a dtype and a shape. The running maximum and minimum
// (cummax, cummin) also give the i64 index each came from: a later equal
// value takes over, and NaN is above every number (each NaN takes over), as
// PyTorch's.
#include <cstdint>

#include "kernel_registry.hpp"

namespace rumus {

enum class ScanOp : std::uint32_t { sum = 0, prod = 1 };  // the shader's pc.op

struct ScanKernel {
  static constexpr std::string_view name = "scan";
  using Fn = void(Backend&, TensorArg out, TensorArg in, ScanOp op);
};

enum class ExtremeOp : std::uint32_t { max = 0, min = 1 };  // the shader's pc.op

struct CumExtremeKernel {
  static constexpr std::string_view name = "cumextreme";
  using Fn = void(Backend&, TensorArg values, TensorArg indices, TensorArg in, ExtremeOp op);
};

}  // namespace rumus
