#pragma once
// The pooling family (src/ops/pooling.cpp): windows over planes of a
// contiguous [planes, H, W] input (planes = N * C).
#include "kernel_registry.hpp"

namespace rumus {

struct Pool2dParams {
  PoolKind kind = PoolKind::max;
  std::int64_t planes = 0, height = 0, width = 0, out_h = 0, out_w = 0;
  std::int64_t kernel_h = 1, kernel_w = 1, stride_h = 1, stride_w = 1, pad_h = 0, pad_w = 0;
  std::int64_t dilation_h = 1, dilation_w = 1;  // max only
  bool count_include_pad = true;               // avg only
};

// Into a contiguous [planes, OH, OW] output; `indices` (i64, out's shape) only
// for max, and optional there.
struct Pool2dForwardKernel {
  static constexpr std::string_view name = "pool2d_forward";
  using Fn = void(Backend&, const Pool2dParams& p, TensorArg out, TensorArg indices, TensorArg in);
};

// Overwrites grad_in [planes, H, W] (contiguous) from grad_out [planes, OH, OW] (contiguous).
struct Pool2dBackwardKernel {
  static constexpr std::string_view name = "pool2d_backward";
  using Fn = void(Backend&, const Pool2dParams& p, TensorArg grad_in, TensorArg grad_out, TensorArg indices);
};

}  // namespace rumus
