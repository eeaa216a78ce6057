// Transposed convolution as the adjoint of conv2d's lowering: one batched
// GEMM (weight^T per group @ input) gives the columns, col2im sums them into
// the full image, and a crop (padding) and zero rows/columns at the end
// (output_padding past the full image) give the output.
// Both are differentiable ops on every device, so the whole op is: its
// backward is im2col + GEMM, and differentiating that again is col2im + GEMM.
#include "rumus/ops/conv_transpose.hpp"

#include "autocast.hpp"
#include "op_util.hpp"
#include "rumus/ops/conv.hpp"
#include "rumus/ops/linalg.hpp"
#include "rumus/ops/padding.hpp"

namespace rumus {

namespace {

void check_pair(const char* op, const char* what, Size2 v, std::int64_t min) {
  if (v[0] < min || v[1] < min)
    throw ShapeError(fmt::format("{}: expected {} >= {}, got [{}, {}]", op, what, min, v[0], v[1]));
}

void check_same_dtype(const char* op, const Tensor& input, const Tensor& t, const char* what) {
  detail::check_same_device(op, input, t);
  if (t.dtype() != input.dtype())
    throw DTypeError(fmt::format("{}: {} dtype {} differs from input dtype {}", op, what, dtype_name(t.dtype()),
                                 dtype_name(input.dtype())));
}

Tensor conv_transpose2d_impl(const char* op, const Tensor& input_in, const Tensor& weight_in, const Tensor& bias_in,
                             const ConvTranspose2dOptions& o) {
  const auto cast = detail::autocast(op, input_in, weight_in, bias_in);
  const Tensor &input = cast[0], &weight = cast[1], &bias = cast[2];
  detail::check_defined(op, input);
  detail::check_defined(op, weight);
  detail::check_floating(op, input);
  if (input.dim() != 3 && input.dim() != 4)
    throw ShapeError(fmt::format("{}: expected input of 4 dims [N, C, H, W] or 3 (unbatched) [C, H, W], got {}", op,
                                 shape_str(input.shape())));
  if (weight.dim() != 4)
    throw ShapeError(fmt::format("{}: expected weight of 4 dims [C, OC/groups, KH, KW], got {}", op,
                                 shape_str(weight.shape())));
  check_same_dtype(op, input, weight, "weight");
  check_pair(op, "stride", o.stride, 1);
  check_pair(op, "dilation", o.dilation, 1);
  check_pair(op, "padding", o.padding, 0);
  check_pair(op, "output_padding", o.output_padding, 0);
  const std::int64_t groups = o.groups;
  if (groups < 1) throw ShapeError(fmt::format("{}: expected groups >= 1, got {}", op, groups));
  for (std::size_t i = 0; i < 2; ++i)
    if (o.output_padding[i] >= o.stride[i] && o.output_padding[i] >= o.dilation[i])
      throw ShapeError(fmt::format("{}: output_padding [{}, {}] must be smaller than either stride [{}, {}] or "
                                   "dilation [{}, {}]",
                                   op, o.output_padding[0], o.output_padding[1], o.stride[0], o.stride[1],
                                   o.dilation[0], o.dilation[1]));
  const bool unbatched = input.dim() == 3;
  const Tensor x = unbatched ? input.unsqueeze(0) : input;
  const std::int64_t n = x.shape()[0], c = x.shape()[1], h = x.shape()[2], w = x.shape()[3];
  if (weight.shape()[0] != c || c % groups != 0)
    throw ShapeError(fmt::format("{}: weight {} expects {} input channels (divisible by groups {}), input {} has {}",
                                 op, shape_str(weight.shape()), weight.shape()[0], groups, shape_str(input.shape()), c));
  const std::int64_t ocg = weight.shape()[1], oc = ocg * groups, kh = weight.shape()[2], kw = weight.shape()[3];
  if (bias.defined()) {
    check_same_dtype(op, input, bias, "bias");
    if (bias.shape() != Shape{oc})
      throw ShapeError(fmt::format("{}: expected bias of shape [{}], got {}", op, oc, shape_str(bias.shape())));
  }
  // Every input position scatters into the full image of fh x fw; the output
  // drops `padding` rows/columns at each side of it and gains output_padding
  // at the bottom/right (zeros only past the full image).
  const std::int64_t fh = (h - 1) * o.stride[0] + o.dilation[0] * (kh - 1) + 1,
                     fw = (w - 1) * o.stride[1] + o.dilation[1] * (kw - 1) + 1;
  const std::int64_t oh = fh - 2 * o.padding[0] + o.output_padding[0], ow = fw - 2 * o.padding[1] + o.output_padding[1];
  if (oh < 1 || ow < 1)
    throw ShapeError(fmt::format("{}: input {} with kernel {}x{}, stride [{}, {}], padding [{}, {}] and dilation "
                                 "[{}, {}] gives an empty output {}x{}",
                                 op, shape_str(input.shape()), kh, kw, o.stride[0], o.stride[1], o.padding[0],
                                 o.padding[1], o.dilation[0], o.dilation[1], oh, ow));
  const std::int64_t cg = c / groups, k = ocg * kh * kw, l = h * w;
  // cols[n, g] = weight[g]^T [OC/g * KH * KW, C/g] @ x[n, g] [C/g, H * W], channel-major like conv2d's columns.
  const Tensor wt = weight.reshape({groups, cg, k}).transpose(1, 2);
  Tensor cols = matmul(wt, x.reshape({n, groups, cg, l})).reshape({n, oc * kh * kw, l});
  Tensor y = col2im(cols, {fh, fw}, {kh, kw}, {.stride = o.stride, .dilation = o.dilation});
  if (o.padding != Size2(0) || o.output_padding != Size2(0))  // negative sizes crop
    y = pad(y, {-o.padding[1], o.output_padding[1] - o.padding[1], -o.padding[0], o.output_padding[0] - o.padding[0]});
  if (bias.defined()) y = add_channel_bias(y, bias);
  return unbatched ? y.squeeze(0) : y;
}

}  // namespace

Tensor conv_transpose2d(const Tensor& input, const Tensor& weight, const Tensor& bias,
                        const ConvTranspose2dOptions& options) {
  return conv_transpose2d_impl("conv_transpose2d", input, weight, bias, options);
}

Tensor conv_transpose1d(const Tensor& input, const Tensor& weight, const Tensor& bias,
                        const ConvTranspose1dOptions& o) {
  const char* op = "conv_transpose1d";
  detail::check_defined(op, input);
  detail::check_defined(op, weight);
  if (input.dim() != 2 && input.dim() != 3)
    throw ShapeError(fmt::format("{}: expected input of 3 dims [N, C, L] or 2 (unbatched) [C, L], got {}", op,
                                 shape_str(input.shape())));
  if (weight.dim() != 3)
    throw ShapeError(fmt::format("{}: expected weight of 3 dims [C, OC/groups, K], got {}", op,
                                 shape_str(weight.shape())));
  // Height 1 with stride 1 and no padding: the added dim stays of size 1.
  const Tensor y = conv_transpose2d_impl(op, input.unsqueeze(-2), weight.unsqueeze(2), bias,
                                         {.stride = {1, o.stride},
                                          .padding = {0, o.padding},
                                          .output_padding = {0, o.output_padding},
                                          .groups = o.groups,
                                          .dilation = {1, o.dilation}});
  return y.squeeze(-2);
}

}  // namespace rumus
