#pragma once
// The scan family: inclusive prefix sums and products along the middle dim of
// contiguous 3-D views [outer, n, inner], the kernels of cumsum() and
// cumprod() (src/ops/scan.cpp, which flattens any rank and dim to these views):
//   out[o, j, k] = in[o, 0, k] (+ or *) ... in[o, j, k]
// out and in share a dtype and a shape.
#include <cstdint>

#include "kernel_registry.hpp"

namespace rumus {

enum class ScanOp : std::uint32_t { sum = 0, prod = 1 };  // the shader's pc.op

struct ScanKernel {
  static constexpr std::string_view name = "scan";
  using Fn = void(Backend&, TensorArg out, TensorArg in, ScanOp op);
};

}  // namespace rumus
