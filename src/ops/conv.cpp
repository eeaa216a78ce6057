// Convolution as im2col + one (grouped) GEMM for the whole batch; linear and channel bias.
// Devices with direct convolution kernels (the CPU's oneDNN; Vulkan's for f32,
// f16 and bf16) take direct_conv2d instead; the lowering serves the rest.
//
// Column layout: conv2d lowers the batch into cols [C*KH*KW, N*OH*OW] (K-major).
// Then the forward is a single GEMM W[OC, K] @ cols[K, N*L] with a long N dim
// (the shape BLAS runs fastest, and one call instead of N), and the weight
// gradient is a single GEMM gO[OC, N*L] @ cols^T with no batch reduction
// afterwards. The price is that the GEMM result is channel-major [OC, N, L]:
// the permute to NCHW is one pass that also adds the bias, and the backward
// permutes the incoming gradient once. At the CNN's shapes (N=64, L=676/576)
// those two passes are a few percent of the GEMM time, while the per-sample
// alternative ([N, K, L] cols, batched GEMM) needs an extra [N, OC, K] partial
// sum for the weight gradient and runs many small GEMMs.
// The forward keeps cols for the weight gradient (memory for speed, as
// PyTorch's unfold-based convolution does) instead of redoing im2col.
#include "rumus/ops/conv.hpp"

#include "autocast.hpp"
#include "conv_padding.hpp"
#include "op_util.hpp"
#include "../backend/pointwise.hpp"
#include "../backend/gemm.hpp"
#include "../backend/conv.hpp"
#include "rumus/ops/activation.hpp"
#include "rumus/ops/compare.hpp"
#include "rumus/ops/elementwise.hpp"
#include "rumus/ops/linalg.hpp"
#include "rumus/ops/reduction.hpp"

namespace rumus {

using autograd::SavedTensor;
using detail::arg;

namespace {

void check_options(const char* op, const Conv2dOptions& o) {
  for (int i = 0; i < 2; ++i) {
    if (o.stride[i] < 1)
      throw ShapeError(fmt::format("{}: expected stride >= 1, got [{}, {}]", op, o.stride[0], o.stride[1]));
    if (o.dilation[i] < 1)
      throw ShapeError(fmt::format("{}: expected dilation >= 1, got [{}, {}]", op, o.dilation[0], o.dilation[1]));
    if (o.padding[i] < 0)
      throw ShapeError(fmt::format("{}: expected padding >= 0, got [{}, {}]", op, o.padding[0], o.padding[1]));
  }
}

// Window sweep of `kernel` over an [N, C, H, W] input.
Conv2dGeometry geometry(const char* op, std::int64_t n, std::int64_t c, std::int64_t h, std::int64_t w,
                        std::array<std::int64_t, 2> kernel, const Conv2dOptions& o) {
  check_options(op, o);
  if (kernel[0] < 1 || kernel[1] < 1)
    throw ShapeError(fmt::format("{}: expected a kernel of at least 1x1, got {}x{}", op, kernel[0], kernel[1]));
  Conv2dGeometry g;
  g.batch = n;
  g.channels = c;
  g.height = h;
  g.width = w;
  g.kernel_h = kernel[0];
  g.kernel_w = kernel[1];
  g.stride_h = o.stride[0];
  g.stride_w = o.stride[1];
  g.pad_h = o.padding[0];
  g.pad_w = o.padding[1];
  g.dilation_h = o.dilation[0];
  g.dilation_w = o.dilation[1];
  const std::int64_t eh = o.dilation[0] * (kernel[0] - 1) + 1, ew = o.dilation[1] * (kernel[1] - 1) + 1;
  const std::int64_t ph = h + 2 * o.padding[0], pw = w + 2 * o.padding[1];
  if (ph < eh || pw < ew)
    throw ShapeError(fmt::format("{}: input {}x{} (padded {}x{}) is smaller than the kernel {}x{} (dilated {}x{})",
                                 op, h, w, ph, pw, kernel[0], kernel[1], eh, ew));
  g.out_h = (ph - eh) / o.stride[0] + 1;
  g.out_w = (pw - ew) / o.stride[1] + 1;
  return g;
}

Layout cols_as_nkl(const Conv2dGeometry& g) {
  // View of a K-major [K, N, L] buffer as [N, K, L], the kernels' column shape.
  const std::int64_t k = g.channels * g.kernel_h * g.kernel_w, l = g.out_h * g.out_w;
  return Layout{{g.batch, k, l}, {l, g.batch * l, 1}, 0};
}

// c[g] = a[g] @ b[g] over `groups` equal slices of contiguous operands.
void grouped_gemm(const Tensor& c, const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, std::int64_t groups,
                  std::int64_t m, std::int64_t n, std::int64_t k) {
  detail::kernel<GemmKernel>("conv2d", c)(
      GemmArgs::packed(arg(a), arg(b), arg(c), m, n, k, {.trans_a = trans_a, .trans_b = trans_b, .batch = groups}));
}

void check_float_pair(const char* op, const Tensor& x, const Tensor& w, const char* what) {
  detail::check_same_device(op, x, w);
  detail::check_floating(op, x);
  if (w.dtype() != x.dtype())
    throw DTypeError(fmt::format("{}: {} dtype {} differs from input dtype {}", op, what, dtype_name(w.dtype()),
                                 dtype_name(x.dtype())));
}

// The convolution's gradients written with ops, for create_graph: with the
// weight's groups as a batch of matrices, dx = col2im(Wᵀ g) and
// dw = sum over the batch of g im2col(x)ᵀ. im2col and col2im are each other's
// backward, so these differentiate to any order. `input` and `weight` are
// saved with their graph (undefined where no gradient needs them); `y` is
// conv2d_relu's output (the ReLU's mask), else undefined.
std::vector<Tensor> composed_conv2d_grads(const Tensor& grad, const Tensor& input, const Tensor& weight,
                                          const Tensor& y, const Conv2dGeometry& g, std::int64_t oc,
                                          std::int64_t groups, bool gx, bool gw, bool gb) {
  const Tensor go = y.defined() ? mul(grad, gt(y, 0.0).to(grad.dtype())) : grad;
  const std::int64_t l = g.out_h * g.out_w, kg = g.channels / groups * g.kernel_h * g.kernel_w;
  const Tensor go4 = go.reshape({g.batch, groups, oc / groups, l});
  const Conv2dOptions o{.stride = {g.stride_h, g.stride_w},
                        .padding = {g.pad_h, g.pad_w},
                        .dilation = {g.dilation_h, g.dilation_w}};
  const Size2 kernel{g.kernel_h, g.kernel_w};
  std::vector<Tensor> grads(3);
  if (gx) {
    const Tensor w3 = weight.reshape({groups, oc / groups, kg});
    const Tensor dcols = matmul(w3.transpose(1, 2), go4).reshape({g.batch, groups * kg, l});
    grads[0] = col2im(dcols, {g.height, g.width}, kernel, o);
  }
  if (gw) {
    const Tensor cols = im2col(input, kernel, o).reshape({g.batch, groups, kg, l});
    grads[1] = sum(matmul(go4, cols.transpose(-2, -1)), {0}).reshape(weight.shape());
  }
  if (gb) grads[2] = sum(go, {0, 2, 3});
  return grads;
}

// The device's own convolution kernels, on dense NCHW operands; the forward
// keeps the input and the weight for the backward pass, and with `relu` (the
// ReLU fused into the forward kernel) its output, through which the gradient
// passes first.
Tensor direct_conv2d(const char* op, const Tensor& input, const Tensor& weight, const Tensor& bias,
                     const Conv2dGeometry& g, std::int64_t oc, std::int64_t groups, bool relu) {
  const auto forward = detail::kernel<Conv2dForwardKernel>(op, input);
  const DType dt = input.dtype();
  const TensorArg no_bias{nullptr, dt, nullptr};
  Tensor x = input.detach().contiguous(), w = weight.detach().contiguous();
  Tensor b = bias.defined() ? bias.detach().contiguous() : Tensor();
  Tensor out = detail::alloc({g.batch, oc, g.out_h, g.out_w}, dt, input.device());
  if (out.numel() == 0) return out;
  forward(g, oc, groups, arg(out), arg(x), arg(w), b.defined() ? arg(b) : no_bias, relu);
  if (autograd::needs_grad({&input, &weight, &bias})) {
    const bool gx = input.requires_grad(), gw = weight.requires_grad(), gb = bias.defined() && bias.requires_grad();
    autograd::record(op, {input, weight, bias}, out,
                     [op, g, oc, groups, gx, gw, gb, no_bias, sx = SavedTensor(gw ? x : Tensor()),
                      sw = SavedTensor(gx ? w : Tensor()), sy = SavedTensor(relu ? out.detach() : Tensor()),
                      si = SavedTensor(gw ? input : Tensor()),
                      swg = SavedTensor(gx ? weight : Tensor())](const Tensor& grad) {
                       if (grad_enabled())  // under create_graph: the same gradients with ops, recorded
                         return composed_conv2d_grads(grad, si.defined() ? si.get() : Tensor(),
                                                      swg.defined() ? swg.get() : Tensor(),
                                                      sy.defined() ? sy.get() : Tensor(), g, oc, groups, gx, gw, gb);
                       const auto backward_data = detail::kernel<Conv2dBackwardDataKernel>(op, grad);
                       const auto backward_weight = detail::kernel<Conv2dBackwardWeightKernel>(op, grad);
                       // Through the ReLU: zero where its output is (relu_backward reads y > 0 as x > 0).
                       Tensor go = sy.defined()
                                       ? detail::binary_kernel(BinaryOp::relu_backward, op, grad, sy.get(),
                                                               grad.dtype(), 0, 0)
                                       : grad.contiguous();
                       std::vector<Tensor> grads(3);
                       if (gx) {
                         grads[0] = detail::alloc({g.batch, g.channels, g.height, g.width}, go.dtype(), go.device());
                         backward_data(g, oc, groups, arg(grads[0]), arg(go), arg(sw.get()));
                       }
                       if (gw) {
                         const Tensor& x = sx.get();
                         grads[1] = detail::alloc({oc, g.channels / groups, g.kernel_h, g.kernel_w}, go.dtype(),
                                                  go.device());
                         if (gb) grads[2] = detail::alloc({oc}, go.dtype(), go.device());
                         backward_weight(g, oc, groups, arg(grads[1]), gb ? arg(grads[2]) : no_bias,
                                                   arg(go), arg(x));
                       } else if (gb) {
                         grads[2] = sum(go, {0, 2, 3});
                       }
                       return grads;
                     },
                     {}, autograd::Backward::differentiable);
  }
  return out;
}

}  // namespace

namespace {

// conv2d, and with `relu` conv2d_relu: fused where the device's convolution
// kernels can apply the ReLU, else composed of the convolution and relu().
Tensor conv2d_impl(const char* op, const Tensor& input_in, const Tensor& weight_in, const Tensor& bias_in,
                   const Conv2dOptions& o, bool relu) {
  const auto cast = detail::autocast(op, input_in, weight_in, bias_in);
  const Tensor &input = cast[0], &weight = cast[1], &bias = cast[2];
  detail::check_defined(op, input);
  detail::check_defined(op, weight);
  if (input.dim() != 4)
    throw ShapeError(fmt::format("{}: expected input of 4 dims [N, C, H, W], got {}", op, shape_str(input.shape())));
  if (weight.dim() != 4)
    throw ShapeError(fmt::format("{}: expected weight of 4 dims [OC, C/groups, KH, KW], got {}", op,
                                 shape_str(weight.shape())));
  check_float_pair(op, input, weight, "weight");
  const std::int64_t n = input.shape()[0], c = input.shape()[1], oc = weight.shape()[0], groups = o.groups;
  if (groups < 1) throw ShapeError(fmt::format("{}: expected groups >= 1, got {}", op, groups));
  if (c % groups != 0 || oc % groups != 0)
    throw ShapeError(fmt::format("{}: input channels {} and output channels {} must both be divisible by groups {}", op,
                                 c, oc, groups));
  if (weight.shape()[1] * groups != c)
    throw ShapeError(fmt::format("{}: weight {} expects {} input channels ({} per group, groups {}), input {} has {}", op,
                                 shape_str(weight.shape()), weight.shape()[1] * groups, weight.shape()[1], groups,
                                 shape_str(input.shape()), c));
  if (bias.defined()) {
    check_float_pair(op, input, bias, "bias");
    if (bias.shape() != Shape{oc})
      throw ShapeError(fmt::format("{}: expected bias of shape [{}], got {}", op, oc, shape_str(bias.shape())));
  }
  const Conv2dGeometry g =
      geometry(op, n, c, input.shape()[2], input.shape()[3], {weight.shape()[2], weight.shape()[3]}, o);
  if (detail::has_kernels<Conv2dForwardKernel>(input))
    return direct_conv2d(op, input, weight, bias, g, oc, groups, relu);
  const std::int64_t l = g.out_h * g.out_w, nl = n * l, kg = weight.shape()[1] * g.kernel_h * g.kernel_w,
                     ocg = oc / groups;
  const DType dt = input.dtype();
  const Device dev = input.device();
  const auto k_im2col = detail::kernel<Im2colKernel>(op, input);
  const auto k_binary = detail::kernel<BinaryKernel>(op, input);
  const auto k_copy = detail::kernel<CopyKernel>(op, input);

  Tensor out = detail::alloc({n, oc, g.out_h, g.out_w}, dt, dev);
  if (out.numel() == 0) return relu ? rumus::relu(out) : out;
  Tensor cols = detail::alloc({kg * groups, n, l}, dt, dev);
  const Layout cols_nkl = cols_as_nkl(g);
  k_im2col(g, arg(cols, cols_nkl), arg(input));
  Tensor w = weight.detach().contiguous();
  Tensor y = detail::alloc({oc, n, l}, dt, dev);
  grouped_gemm(y, w, false, cols, false, groups, ocg, nl, kg);
  // [OC, N, L] -> [N, OC, L], with the bias added in the same pass.
  const Layout y_nchw{{n, oc, l}, {l, nl, 1}, 0};
  const Layout out3 = Layout::contiguous({n, oc, l});
  if (bias.defined()) {
    const Layout b_bcast{{n, oc, l}, {0, bias.strides()[0], 0}, bias.offset()};
    k_binary(BinaryOp::add, arg(out, out3), arg(y, y_nchw), arg(bias, b_bcast), 0, 0);
  } else {
    k_copy(arg(out, out3), arg(y, y_nchw));
  }

  if (autograd::needs_grad({&input, &weight, &bias})) {
    const bool gx = input.requires_grad(), gw = weight.requires_grad(), gb = bias.defined() && bias.requires_grad();
    autograd::record(
        "conv2d", {input, weight, bias}, out,
        [g, groups, ocg, kg, nl, l, gx, gw, gb, w_shape = weight.shape(), sc = SavedTensor(gw ? cols : Tensor()),
         sw = SavedTensor(gx ? w : Tensor()), si = SavedTensor(gw ? input : Tensor()),
         swg = SavedTensor(gx ? weight : Tensor())](const Tensor& grad) {
          const std::int64_t oc = ocg * groups;
          if (grad_enabled())  // under create_graph: the same gradients with ops, recorded
            return composed_conv2d_grads(grad, si.defined() ? si.get() : Tensor(), swg.defined() ? swg.get() : Tensor(),
                                         Tensor(), g, oc, groups, gx, gw, gb);
          const auto k_col2im = detail::kernel<Col2imKernel>("conv2d", grad);
          const auto k_copy = detail::kernel<CopyKernel>("conv2d", grad);
          // The gradient in the GEMM's channel-major layout [OC, N*L].
          Tensor gt = detail::alloc({oc, g.batch, l}, grad.dtype(), grad.device());
          const Layout g_cnl{{oc, g.batch, l}, {grad.strides()[1], grad.strides()[0], 1}, grad.offset()};
          if (grad.strides()[3] == 1 && grad.strides()[2] == g.out_w) {
            k_copy(arg(gt), arg(grad, g_cnl));
          } else {
            Tensor gc = grad.contiguous();
            k_copy(arg(gt), arg(gc, Layout{{oc, g.batch, l}, {l, oc * l, 1}, 0}));
          }
          std::vector<Tensor> grads(3);
          if (gx) {
            Tensor dcols = detail::alloc({kg * groups, g.batch, l}, grad.dtype(), grad.device());
            grouped_gemm(dcols, sw.get(), true, gt, false, groups, kg, nl, ocg);
            Tensor dx = detail::alloc({g.batch, g.channels, g.height, g.width}, grad.dtype(), grad.device());
            k_col2im(g, arg(dx), arg(dcols, cols_as_nkl(g)));
            grads[0] = dx;
          }
          if (gw) {
            Tensor dw = detail::alloc(w_shape, grad.dtype(), grad.device());
            grouped_gemm(dw, gt, false, sc.get(), true, groups, ocg, kg, nl);
            grads[1] = dw;
          }
          if (gb) grads[2] = sum(gt.view({oc, nl}), {1});
          return grads;
        },
        {}, autograd::Backward::differentiable);
  }
  return relu ? rumus::relu(out) : out;
}

}  // namespace

Tensor conv2d(const Tensor& input, const Tensor& weight, const Tensor& bias, const Conv2dOptions& o) {
  if (auto p = detail::explicit_conv_padding("conv2d", input, weight, o))
    return conv2d_impl("conv2d", p->input, weight, bias, p->options, false);
  return conv2d_impl("conv2d", input, weight, bias, o, false);
}

Tensor conv1d(const Tensor& input, const Tensor& weight, const Tensor& bias, const Conv1dOptions& o) {
  const char* op = "conv1d";
  detail::check_defined(op, input);
  detail::check_defined(op, weight);
  if (input.dim() != 2 && input.dim() != 3)
    throw ShapeError(fmt::format("{}: expected input of 3 dims [N, C, L] or 2 (unbatched) [C, L], got {}", op,
                                 shape_str(input.shape())));
  if (weight.dim() != 3)
    throw ShapeError(fmt::format("{}: expected weight of 3 dims [OC, C/groups, K], got {}", op, shape_str(weight.shape())));
  for (auto [what, v, min] : {std::tuple{"stride", o.stride, 1}, {"padding", o.padding, 0}, {"dilation", o.dilation, 1},
                              {"groups", o.groups, 1}})
    if (v < min) throw ShapeError(fmt::format("{}: expected {} >= {}, got {}", op, what, min, v));
  const bool unbatched = input.dim() == 2;
  const Tensor x = (unbatched ? input.unsqueeze(0) : input).unsqueeze(2);  // [N, C, 1, L]
  const Tensor w = weight.unsqueeze(2);
  const Conv2dOptions o2{.stride = {1, o.stride},
                         .padding = {0, o.padding},
                         .dilation = {1, o.dilation},
                         .groups = o.groups,
                         .padding_str = o.padding_str,
                         .padding_mode = o.padding_mode};
  auto p = detail::explicit_conv_padding(op, x, w, o2);
  Tensor y = p ? conv2d(p->input, w, bias, p->options) : conv2d(x, w, bias, o2);
  y = y.squeeze(2);
  return unbatched ? y.squeeze(0) : y;
}

Tensor conv2d_relu(const Tensor& input, const Tensor& weight, const Tensor& bias, const Conv2dOptions& o) {
  if (auto p = detail::explicit_conv_padding("conv2d_relu", input, weight, o))
    return conv2d_impl("conv2d_relu", p->input, weight, bias, p->options, true);
  return conv2d_impl("conv2d_relu", input, weight, bias, o, true);
}

Tensor im2col(const Tensor& input, Size2 kernel, const Conv2dOptions& o) {
  detail::check_floating("im2col", input);
  if (input.dim() != 4)
    throw ShapeError(fmt::format("im2col: expected input of 4 dims [N, C, H, W], got {}", shape_str(input.shape())));
  const Conv2dGeometry g =
      geometry("im2col", input.shape()[0], input.shape()[1], input.shape()[2], input.shape()[3], kernel, o);
  Tensor out = detail::alloc({g.batch, g.channels * g.kernel_h * g.kernel_w, g.out_h * g.out_w}, input.dtype(),
                             input.device());
  if (out.numel() > 0) detail::kernel<Im2colKernel>("im2col", input)(g, arg(out), arg(input));
  // Each is the other's adjoint, so each backward is the other op (recorded: differentiable to any order).
  if (autograd::needs_grad({&input}))
    autograd::record("im2col", {input}, out, [g, kernel, o](const Tensor& grad) {
      return std::vector<Tensor>{col2im(grad, {g.height, g.width}, kernel, o)};
    }, {}, autograd::Backward::differentiable);
  return out;
}

Tensor col2im(const Tensor& cols, Size2 output_size, Size2 kernel,
              const Conv2dOptions& o) {
  detail::check_floating("col2im", cols);
  if (cols.dim() != 3)
    throw ShapeError(fmt::format("col2im: expected cols of 3 dims [N, C*KH*KW, L], got {}", shape_str(cols.shape())));
  const std::int64_t kk = kernel[0] * kernel[1];
  if (kk < 1 || cols.shape()[1] % kk != 0)
    throw ShapeError(fmt::format("col2im: dim 1 of cols {} is not a multiple of the kernel size {}x{}",
                                 shape_str(cols.shape()), kernel[0], kernel[1]));
  const Conv2dGeometry g =
      geometry("col2im", cols.shape()[0], cols.shape()[1] / kk, output_size[0], output_size[1], kernel, o);
  if (g.out_h * g.out_w != cols.shape()[2])
    throw ShapeError(fmt::format("col2im: expected {} blocks ({}x{}) for output size {}x{}, got cols {}",
                                 g.out_h * g.out_w, g.out_h, g.out_w, output_size[0], output_size[1],
                                 shape_str(cols.shape())));
  Tensor out = detail::alloc({g.batch, g.channels, g.height, g.width}, cols.dtype(), cols.device());
  if (out.numel() > 0) detail::kernel<Col2imKernel>("col2im", cols)(g, arg(out), arg(cols));
  if (autograd::needs_grad({&cols}))
    autograd::record("col2im", {cols}, out, [kernel, o](const Tensor& grad) {
      return std::vector<Tensor>{im2col(grad, kernel, o)};
    }, {}, autograd::Backward::differentiable);
  return out;
}

namespace {

// linear, and with `relu` linear_relu: the ReLU applied in place to the GEMM's
// output (no second tensor) and undone in the same backward node.
Tensor linear_impl(const char* op, const Tensor& input_in, const Tensor& weight_in, const Tensor& bias_in, bool relu) {
  const auto cast = detail::autocast(op, input_in, weight_in, bias_in);
  const Tensor &input = cast[0], &weight = cast[1], &bias = cast[2];
  detail::check_defined(op, input);
  detail::check_defined(op, weight);
  check_float_pair(op, input, weight, "weight");
  if (weight.dim() != 2)
    throw ShapeError(fmt::format("{}: expected weight of 2 dims [out, in], got {}", op, shape_str(weight.shape())));
  if (input.dim() < 1 || input.shape().back() != weight.shape()[1])
    throw ShapeError(fmt::format("{}: input {} does not end in the weight's in_features {} (weight {})",
                                 op, shape_str(input.shape()), weight.shape()[1], shape_str(weight.shape())));
  const std::int64_t in_f = weight.shape()[1], out_f = weight.shape()[0];
  if (bias.defined()) {
    check_float_pair(op, input, bias, "bias");
    if (bias.shape() != Shape{out_f})
      throw ShapeError(fmt::format("{}: expected bias of shape [{}], got {}", op, out_f, shape_str(bias.shape())));
  }
  std::int64_t m = 1;  // rows: every dim but the last (not inferred: with in_f = 0 there is nothing to infer from)
  for (std::int64_t d = 0; d + 1 < input.dim(); ++d) m *= input.shape()[std::size_t(d)];
  Tensor x2 = input.detach().reshape({m, in_f});
  Tensor out2 = detail::alloc({m, out_f}, input.dtype(), input.device());
  // The bias and the ReLU are applied by the GEMM (in its epilogue where the backend has one).
  detail::gemm_into(out2, x2, weight.detach().t(), 0.0, bias.defined() ? bias.detach() : Tensor(), relu);
  Shape out_shape = input.shape();
  out_shape.back() = out_f;
  Tensor out(out2.storage_ptr(), Layout::contiguous(out_shape), out2.dtype());
  if (autograd::needs_grad({&input, &weight, &bias})) {
    const bool gx = input.requires_grad(), gw = weight.requires_grad(), gb = bias.defined() && bias.requires_grad();
    autograd::record(op, {input, weight, bias}, out,
                     [op, gx, gw, gb, in_shape = input.shape(), in_f, m, out_f, sx = SavedTensor(gw ? x2 : Tensor()),
                      sw = SavedTensor(gx ? weight : Tensor()), si = SavedTensor(gw ? input : Tensor()),
                      sy = SavedTensor(relu ? out : Tensor())](const Tensor& grad) {
                       if (grad_enabled()) {  // under create_graph: the same products with ops, recorded
                         Tensor g2 = (sy.defined() ? mul(grad, gt(sy.get(), 0.0).to(grad.dtype())) : grad)
                                         .reshape({m, out_f});
                         return std::vector<Tensor>{gx ? matmul(g2, sw.get()).reshape(in_shape) : Tensor(),
                                                    gw ? matmul(g2.t(), si.get().reshape({m, in_f})) : Tensor(),
                                                    gb ? sum(g2, {0}) : Tensor()};
                       }
                       // Through the ReLU first: zero where its output is.
                       Tensor g2 = (sy.defined() ? detail::binary_kernel(BinaryOp::relu_backward, op, grad, sy.get(),
                                                                         grad.dtype(), 0, 0)
                                                 : grad)
                                       .reshape({m, out_f});
                       return std::vector<Tensor>{gx ? detail::gemm(g2, sw.get().detach()).view(in_shape) : Tensor(),
                                                  gw ? detail::gemm(g2.t(), sx.get()) : Tensor(),
                                                  gb ? sum(g2, {0}) : Tensor()};
                     },
                     {}, autograd::Backward::differentiable);
  }
  return out;
}

}  // namespace

Tensor linear(const Tensor& input, const Tensor& weight, const Tensor& bias) {
  return linear_impl("linear", input, weight, bias, false);
}

Tensor linear_relu(const Tensor& input, const Tensor& weight, const Tensor& bias) {
  return linear_impl("linear_relu", input, weight, bias, true);
}

Tensor add_channel_bias(const Tensor& input, const Tensor& bias) {
  const char* op = "add_channel_bias";
  detail::check_defined(op, input);
  detail::check_defined(op, bias);
  check_float_pair(op, input, bias, "bias");
  if (input.dim() < 2)
    throw ShapeError(fmt::format("add_channel_bias: expected input of at least 2 dims [N, C, ...], got {}",
                                 shape_str(input.shape())));
  const std::int64_t c = input.shape()[1];
  if (bias.shape() != Shape{c})
    throw ShapeError(fmt::format("add_channel_bias: expected bias of shape [{}] for input {}, got {}", c,
                                 shape_str(input.shape()), shape_str(bias.shape())));
  Shape bshape(std::size_t(input.dim()), 1);
  bshape[1] = c;
  Tensor out = detail::binary_kernel(BinaryOp::add, op, input.detach(), bias.detach().view(bshape), input.dtype());
  if (autograd::needs_grad({&input, &bias})) {
    std::vector<std::int64_t> dims;
    for (std::int64_t d = 0; d < input.dim(); ++d)
      if (d != 1) dims.push_back(d);
    autograd::record(op, {input, bias}, out, [dims](const Tensor& g) {
      return std::vector<Tensor>{g, sum(g, dims)};
    }, {}, autograd::Backward::differentiable);
  }
  return out;
}

}  // namespace rumus
