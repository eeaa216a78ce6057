#pragma once
// Transposed convolution (the gradient of conv2d/conv1d in its input, as an op):
// torch.nn.functional.conv_transpose2d and conv_transpose1d.
#include <cstdint>

#include "rumus/ops/size2.hpp"
#include "rumus/core/tensor.hpp"
#include "rumus/core/export.hpp"

RUMUS_API_BEGIN

namespace rumus {

// PyTorch's argument order: stride, padding, output_padding, groups, dilation.
struct ConvTranspose2dOptions {
  Size2 stride{1, 1};
  Size2 padding{0, 0};
  Size2 output_padding{0, 0};  // extra rows/columns at the bottom/right; less than stride or dilation
  std::int64_t groups = 1;
  Size2 dilation{1, 1};
};

// input [N, C, H, W] (or unbatched [C, H, W]), weight [C, OC/groups, KH, KW]
// (PyTorch's layout: input channels first), bias [OC] or undefined. Output
// [N, OC, (H-1)*stride - 2*padding + dilation*(KH-1) + output_padding + 1, ...].
// Composed of matmul and col2im: runs on every device and differentiates to any order.
Tensor conv_transpose2d(const Tensor& input, const Tensor& weight, const Tensor& bias = {},
                        const ConvTranspose2dOptions& options = {});

struct ConvTranspose1dOptions {
  std::int64_t stride = 1;
  std::int64_t padding = 0;
  std::int64_t output_padding = 0;
  std::int64_t groups = 1;
  std::int64_t dilation = 1;
};

// input [N, C, L] (or unbatched [C, L]), weight [C, OC/groups, K], bias [OC]:
// conv_transpose2d of a height-1 image.
Tensor conv_transpose1d(const Tensor& input, const Tensor& weight, const Tensor& bias = {},
                        const ConvTranspose1dOptions& options = {});

}  // namespace rumus

RUMUS_API_END
