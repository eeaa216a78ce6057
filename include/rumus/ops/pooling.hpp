#pragma once
#include <array>
#include <optional>
#include <tuple>

#include "rumus/ops/size2.hpp"
#include "rumus/core/tensor.hpp"
#include "rumus/core/export.hpp"

RUMUS_API_BEGIN

namespace rumus {

struct Pool2dOptions {
  Size2 kernel{2, 2};
  Size2 stride{0, 0};  // 0 = kernel size, as PyTorch's default
  Size2 padding{0, 0};
  bool count_include_pad = true;  // avg_pool2d only
  Size2 dilation{1, 1};  // max_pool2d only
  bool ceil_mode = false;  // round the output size up, as PyTorch's ceil_mode
};

Tensor max_pool2d(const Tensor& input, const Pool2dOptions& options);
Tensor max_pool2d(const Tensor& input, std::int64_t kernel);
Tensor avg_pool2d(const Tensor& input, const Pool2dOptions& options);
Tensor avg_pool2d(const Tensor& input, std::int64_t kernel);
// Input [N, C, H, W] or [C, H, W].
Tensor adaptive_avg_pool2d(const Tensor& input, Size2 output_size);

struct Pool1dOptions {
  std::int64_t kernel = 2;
  std::int64_t stride = 0;  // 0 = kernel size, as PyTorch's default
  std::int64_t padding = 0;
  bool count_include_pad = true;  // avg_pool1d only
  std::int64_t dilation = 1;      // max_pool1d only
  bool ceil_mode = false;
};

// torch.nn.functional.max_pool1d, avg_pool1d, adaptive_avg_pool1d: input
// [N, C, L] or [C, L], pooled as a height-1 image by the 2-D kernels.
Tensor max_pool1d(const Tensor& input, const Pool1dOptions& options);
Tensor avg_pool1d(const Tensor& input, const Pool1dOptions& options);
Tensor adaptive_avg_pool1d(const Tensor& input, std::int64_t output_size);

// torch.nn.functional.adaptive_max_pool2d / adaptive_max_pool1d: the maximum
// over PyTorch's adaptive windows (floor(i * in / out) to ceil((i + 1) * in /
// out)) of input [N, C, H, W] or [C, H, W] ([N, C, L] or [C, L]). The
// _with_indices forms also give each maximum's flat index into its input
// plane (i64, h * W + w), as PyTorch's return_indices. A gather of the
// windows and max over them: differentiable to any order on every device.
// torch.nn.functional.max_pool2d with return_indices: the maxima and their
// flat indices into each input plane (i64), for max_unpool2d. Composed (a
// gather of the windows and max): differentiable to any order.
std::tuple<Tensor, Tensor> max_pool2d_with_indices(const Tensor& input, const Pool2dOptions& options);
// torch.nn.functional.max_unpool2d: input [N, C, H, W] or [C, H, W] placed at
// `indices` (from max_pool2d_with_indices) in zeros of output_size (default
// (H - 1) * stride - 2 * padding + kernel); a scatter_add, differentiable.
Tensor max_unpool2d(const Tensor& input, const Tensor& indices, const Pool2dOptions& options,
                    std::optional<Size2> output_size = std::nullopt);
Tensor adaptive_max_pool2d(const Tensor& input, Size2 output_size);
std::tuple<Tensor, Tensor> adaptive_max_pool2d_with_indices(const Tensor& input, Size2 output_size);
Tensor adaptive_max_pool1d(const Tensor& input, std::int64_t output_size);
std::tuple<Tensor, Tensor> adaptive_max_pool1d_with_indices(const Tensor& input, std::int64_t output_size);

}  // namespace rumus

RUMUS_API_END
