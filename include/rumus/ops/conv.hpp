#pragma once
// Convolution (NCHW) as batched im2col + GEMM.
#include <array>
#include <string>

#include "rumus/ops/size2.hpp"
#include "rumus/core/tensor.hpp"
#include "rumus/core/export.hpp"

RUMUS_API_BEGIN

namespace rumus {

struct Conv2dOptions {
  Size2 stride{1, 1};
  Size2 padding{0, 0};
  Size2 dilation{1, 1};
  std::int64_t groups = 1;
  // PyTorch's padding given as a word instead of numbers: "same" (output as
  // large as the input; stride 1 only; an odd total puts the extra row or
  // column at the bottom/right) or "valid" (none). Empty: `padding` applies.
  std::string padding_str;
  // nn::Conv2d's padding_mode: what the padding reads, "zeros", "reflect",
  // "replicate" or "circular" (the last three pad the input with pad() first).
  std::string padding_mode = "zeros";
};

// input [N, C, H, W], weight [OC, C/groups, KH, KW], bias [OC] or undefined.
Tensor conv2d(const Tensor& input, const Tensor& weight, const Tensor& bias = {}, const Conv2dOptions& options = {});
// relu(conv2d(...)) as one op (torch.ao.nn.intrinsic's ConvReLU2d): on the
// CPU the ReLU runs inside the convolution kernel, elsewhere after it.
Tensor conv2d_relu(const Tensor& input, const Tensor& weight, const Tensor& bias = {},
                   const Conv2dOptions& options = {});

struct Conv1dOptions {
  std::int64_t stride = 1;
  std::int64_t padding = 0;
  std::int64_t dilation = 1;
  std::int64_t groups = 1;
  std::string padding_str;             // "same" or "valid", as Conv2dOptions
  std::string padding_mode = "zeros";  // "zeros", "reflect", "replicate" or "circular"
};

// torch.nn.functional.conv1d: input [N, C, L] (or unbatched [C, L]), weight
// [OC, C/groups, K], bias [OC] or undefined. The 2-D convolution of a height-1
// image, so it runs on the same kernels and differentiates the same way.
Tensor conv1d(const Tensor& input, const Tensor& weight, const Tensor& bias = {}, const Conv1dOptions& options = {});

// [N, C, H, W] -> [N, C*KH*KW, OH*OW] (torch.nn.functional.unfold); col2im is its adjoint (fold).
Tensor im2col(const Tensor& input, Size2 kernel, const Conv2dOptions& options = {});
Tensor col2im(const Tensor& cols, Size2 output_size, Size2 kernel,
              const Conv2dOptions& options = {});

// x [.., in] @ weight[out, in]^T + bias[out]: one op, bias gradient by row-sum.
Tensor linear(const Tensor& input, const Tensor& weight, const Tensor& bias = {});
// relu(linear(...)) as one op (LinearReLU): the ReLU in place on the product.
Tensor linear_relu(const Tensor& input, const Tensor& weight, const Tensor& bias = {});
// x [N, C, ...] + bias [C] broadcast over the channel dim.
Tensor add_channel_bias(const Tensor& input, const Tensor& bias);

}  // namespace rumus

RUMUS_API_END
