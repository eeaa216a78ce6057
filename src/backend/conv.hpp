#pragma once
// The convolution family (src/ops/conv.cpp): the im2col/col2im lowering every
// device has, and direct convolutions for devices with a convolution library
// or kernel of their own; where a device has no direct kernel for a dtype,
// ops lower the convolution to im2col + GEMM.
#include "kernel_registry.hpp"

namespace rumus {

// Geometry of a 2-D convolution window sweep (NCHW).
struct Conv2dGeometry {
  std::int64_t batch = 0, channels = 0, height = 0, width = 0;  // input
  std::int64_t kernel_h = 1, kernel_w = 1;
  std::int64_t stride_h = 1, stride_w = 1;
  std::int64_t pad_h = 0, pad_w = 0;
  std::int64_t dilation_h = 1, dilation_w = 1;
  std::int64_t out_h = 0, out_w = 0;
};

// `in` is [N, C, H, W] (any strides); `cols` is [N, C*KH*KW, OH*OW] (any
// strides; row index c*KH*KW + kh*KW + kw). im2col writes every element of
// cols (zeros where the window hits padding); col2im overwrites `out`
// [N, C, H, W] (contiguous) with the sum of the column entries that map onto
// each pixel.
struct Im2colKernel {
  static constexpr std::string_view name = "im2col";
  using Fn = void(Backend&, const Conv2dGeometry& g, TensorArg cols, TensorArg in);
};
struct Col2imKernel {
  static constexpr std::string_view name = "col2im";
  using Fn = void(Backend&, const Conv2dGeometry& g, TensorArg out, TensorArg cols);
};

// Direct convolution on dense NCHW operands. Weights are [OC, C/groups, KH, KW];
// a bias or grad_bias whose storage is null is absent. Every output is
// overwritten. `relu`: the forward writes max(0, convolution + bias).
struct Conv2dForwardKernel {
  static constexpr std::string_view name = "conv2d_forward";
  using Fn = void(Backend&, const Conv2dGeometry& g, std::int64_t out_channels, std::int64_t groups,
                  TensorArg out, TensorArg in, TensorArg weight, TensorArg bias, bool relu);
};
struct Conv2dBackwardDataKernel {
  static constexpr std::string_view name = "conv2d_backward_data";
  using Fn = void(Backend&, const Conv2dGeometry& g, std::int64_t out_channels, std::int64_t groups,
                  TensorArg grad_in, TensorArg grad_out, TensorArg weight);
};
struct Conv2dBackwardWeightKernel {
  static constexpr std::string_view name = "conv2d_backward_weight";
  using Fn = void(Backend&, const Conv2dGeometry& g, std::int64_t out_channels, std::int64_t groups,
                  TensorArg grad_weight, TensorArg grad_bias, TensorArg grad_out, TensorArg in);
};

}  // namespace rumus
