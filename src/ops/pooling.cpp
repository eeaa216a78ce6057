// 2-D pooling over [N, C, H, W] (or [C, H, W]) inputs: one forward and one backward kernel for all kinds.
#include "rumus/ops/pooling.hpp"

#include "op_util.hpp"
#include "../backend/pool.hpp"
#include "rumus/ops/compare.hpp"
#include "rumus/ops/creation.hpp"
#include "rumus/ops/indexing.hpp"

namespace rumus {

using detail::arg;

namespace {

void check_input(const char* op, const Tensor& x) {
  detail::check_floating(op, x);
  if (x.dim() != 3 && x.dim() != 4)
    throw ShapeError(fmt::format("{}: expected input of 4 dims [N, C, H, W] or 3 dims [C, H, W], got {}", op,
                                 shape_str(x.shape())));
}

// Output size along one dim, as PyTorch computes it (ceil_mode drops a last
// window that would start in the right padding).
std::int64_t pooled_size(std::int64_t in, std::int64_t k, std::int64_t s, std::int64_t p, std::int64_t d, bool ceil) {
  const std::int64_t span = in + 2 * p - d * (k - 1) - 1;
  if (span < 0) return 0;
  std::int64_t out = (span + (ceil ? s - 1 : 0)) / s + 1;
  if (ceil && (out - 1) * s >= in + p) --out;
  return out;
}

Tensor avg_pool_adjoint(const char* op, const Tensor& g, const Pool2dParams& p, const Shape& in_shape);

// The average poolings are linear: their backward is the adjoint map (the
// backward kernel) and the adjoint's backward is the pooling again, each
// recorded, so both differentiate to any order (used under create_graph).
Tensor avg_pool_apply(const char* op, const Tensor& x, const Pool2dParams& p, const Shape& out_shape) {
  Tensor xc = x.detach().contiguous();
  Tensor out = detail::alloc(out_shape, x.dtype(), x.device());
  if (out.numel() > 0) detail::kernel<Pool2dForwardKernel>(op, x)(p, arg(out), TensorArg{}, arg(xc));
  if (autograd::needs_grad({&x}))
    autograd::record(op, {x}, out, [op, p, in_shape = x.shape()](const Tensor& g) {
      return std::vector<Tensor>{avg_pool_adjoint(op, g, p, in_shape)};
    }, {}, autograd::Backward::differentiable);
  return out;
}

Tensor avg_pool_adjoint(const char* op, const Tensor& g, const Pool2dParams& p, const Shape& in_shape) {
  Tensor gi = detail::alloc(in_shape, g.dtype(), g.device());
  Tensor gc = g.detach().contiguous();
  if (gi.numel() > 0) detail::kernel<Pool2dBackwardKernel>(op, g)(p, arg(gi), arg(gc), TensorArg{});
  if (autograd::needs_grad({&g}))
    autograd::record(op, {g}, gi, [op, p, out_shape = g.shape()](const Tensor& gg) {
      return std::vector<Tensor>{avg_pool_apply(op, gg, p, out_shape)};
    }, {}, autograd::Backward::differentiable);
  return gi;
}

// Max pooling's gradient with ops: g added into zeros at the saved argmax of
// each window (scatter_add, linear in g; a window with no argmax, index -1,
// passes nothing).
Tensor max_pool_composed_grad(const Tensor& g, const Tensor& indices, const Pool2dParams& p, const Shape& in_shape) {
  const std::int64_t ohw = p.out_h * p.out_w;
  const Tensor idx = indices.reshape({p.planes, ohw});
  const Tensor found = ge(idx, 0.0);
  const Tensor at = where(found, idx, zeros({}, {.dtype = DType::i64, .device = idx.device()}));
  const Tensor src = where(found, g.reshape({p.planes, ohw}), 0.0);
  const Tensor gi = zeros({p.planes, p.height * p.width}, {.dtype = g.dtype(), .device = g.device()});
  return scatter_add(gi, 1, at, src).reshape(in_shape);
}

Tensor run_pool(const char* op, const Tensor& x, Pool2dParams p) {
  const std::int64_t nd = x.dim();
  p.planes = x.numel() / std::max<std::int64_t>(x.shape()[nd - 1] * x.shape()[nd - 2], 1);
  p.height = x.shape()[nd - 2];
  p.width = x.shape()[nd - 1];
  Shape out_shape = x.shape();
  out_shape[nd - 2] = p.out_h;
  out_shape[nd - 1] = p.out_w;
  Tensor xc = x.detach().contiguous();
  Tensor out = detail::alloc(out_shape, x.dtype(), x.device());
  Tensor indices;
  if (p.kind == PoolKind::max) indices = detail::alloc(out_shape, DType::i64, x.device());
  if (out.numel() > 0)
    detail::kernel<Pool2dForwardKernel>(op, x)(p, arg(out), indices.defined() ? arg(indices) : TensorArg{}, arg(xc));
  if (autograd::needs_grad({&x}))
    autograd::record(op, {x}, out,
                     [op, p, in_shape = x.shape(), si = autograd::SavedTensor(indices)](const Tensor& g) {
                       if (grad_enabled())  // under create_graph: recorded, differentiable in g
                         return std::vector<Tensor>{si.defined() ? max_pool_composed_grad(g, si.get(), p, in_shape)
                                                                 : avg_pool_adjoint(op, g, p, in_shape)};
                       Tensor gi = detail::alloc(in_shape, g.dtype(), g.device());
                       Tensor gc = g.contiguous();
                       if (gi.numel() > 0)
                         detail::kernel<Pool2dBackwardKernel>(op, g)(p, arg(gi), arg(gc),
                                                            si.defined() ? arg(si.get()) : TensorArg{});
                       return std::vector<Tensor>{gi};
                     },
                     {}, autograd::Backward::differentiable);
  return out;
}

Tensor fixed_pool(const char* op, PoolKind kind, const Tensor& x, const Pool2dOptions& o) {
  check_input(op, x);
  Pool2dParams p;
  p.kind = kind;
  p.kernel_h = o.kernel[0];
  p.kernel_w = o.kernel[1];
  p.stride_h = o.stride[0] == 0 ? o.kernel[0] : o.stride[0];
  p.stride_w = o.stride[1] == 0 ? o.kernel[1] : o.stride[1];
  p.pad_h = o.padding[0];
  p.pad_w = o.padding[1];
  p.dilation_h = kind == PoolKind::max ? o.dilation[0] : 1;
  p.dilation_w = kind == PoolKind::max ? o.dilation[1] : 1;
  p.count_include_pad = o.count_include_pad;
  if (p.kernel_h < 1 || p.kernel_w < 1)
    throw ShapeError(fmt::format("{}: expected a kernel of at least 1x1, got {}x{}", op, o.kernel[0], o.kernel[1]));
  if (p.stride_h < 1 || p.stride_w < 1)
    throw ShapeError(fmt::format("{}: expected stride >= 1 (or 0 for the kernel size), got [{}, {}]", op,
                                 o.stride[0], o.stride[1]));
  if (p.dilation_h < 1 || p.dilation_w < 1)
    throw ShapeError(fmt::format("{}: expected dilation >= 1, got [{}, {}]", op, o.dilation[0], o.dilation[1]));
  const std::int64_t eh = p.dilation_h * (p.kernel_h - 1) + 1, ew = p.dilation_w * (p.kernel_w - 1) + 1;
  if (p.pad_h < 0 || p.pad_w < 0 || 2 * p.pad_h > eh || 2 * p.pad_w > ew)
    throw ShapeError(fmt::format("{}: padding [{}, {}] must be between 0 and half the kernel size {}x{}", op,
                                 p.pad_h, p.pad_w, eh, ew));
  const std::int64_t nd = x.dim(), h = x.shape()[nd - 2], w = x.shape()[nd - 1];
  p.out_h = pooled_size(h, p.kernel_h, p.stride_h, p.pad_h, p.dilation_h, o.ceil_mode);
  p.out_w = pooled_size(w, p.kernel_w, p.stride_w, p.pad_w, p.dilation_w, o.ceil_mode);
  if (p.out_h < 1 || p.out_w < 1)
    throw ShapeError(fmt::format("{}: input {}x{} (padding [{}, {}]) is smaller than the kernel {}x{}", op, h, w,
                                 p.pad_h, p.pad_w, eh, ew));
  return run_pool(op, x, p);
}

}  // namespace

Tensor max_pool2d(const Tensor& x, const Pool2dOptions& o) { return fixed_pool("max_pool2d", PoolKind::max, x, o); }
Tensor max_pool2d(const Tensor& x, std::int64_t kernel) {
  return max_pool2d(x, Pool2dOptions{.kernel = {kernel, kernel}});
}
Tensor avg_pool2d(const Tensor& x, const Pool2dOptions& o) { return fixed_pool("avg_pool2d", PoolKind::avg, x, o); }
Tensor avg_pool2d(const Tensor& x, std::int64_t kernel) {
  return avg_pool2d(x, Pool2dOptions{.kernel = {kernel, kernel}});
}

Tensor adaptive_avg_pool2d(const Tensor& x, Size2 size) {
  const char* op = "adaptive_avg_pool2d";
  check_input(op, x);
  if (size[0] < 1 || size[1] < 1)
    throw ShapeError(fmt::format("{}: expected an output size of at least 1x1, got {}x{}", op, size[0], size[1]));
  const std::int64_t nd = x.dim();
  if (x.shape()[nd - 2] < 1 || x.shape()[nd - 1] < 1)
    throw ShapeError(fmt::format("{}: expected a non-empty input plane, got {}", op, shape_str(x.shape())));
  Pool2dParams p;
  p.kind = PoolKind::adaptive_avg;
  p.out_h = size[0];
  p.out_w = size[1];
  return run_pool(op, x, p);
}

namespace {
// [N, C, L] or [C, L] as [N, C, 1, L], `pool` applied, and back.
template <class F>
Tensor as_height_one(const char* op, const Tensor& input, F&& pool) {
  detail::check_defined(op, input);
  if (input.dim() != 2 && input.dim() != 3)
    throw ShapeError(fmt::format("{}: expected input of 3 dims [N, C, L] or 2 [C, L], got {}", op,
                                 shape_str(input.shape())));
  const bool unbatched = input.dim() == 2;
  Tensor y = pool((unbatched ? input.unsqueeze(0) : input).unsqueeze(2)).squeeze(2);
  return unbatched ? y.squeeze(0) : y;
}
Pool2dOptions as_2d(const Pool1dOptions& o) {
  return {.kernel = {1, o.kernel}, .stride = {1, o.stride == 0 ? o.kernel : o.stride}, .padding = {0, o.padding},
          .count_include_pad = o.count_include_pad, .dilation = {1, o.dilation}, .ceil_mode = o.ceil_mode};
}
}  // namespace

Tensor max_pool1d(const Tensor& input, const Pool1dOptions& o) {
  return as_height_one("max_pool1d", input, [&](const Tensor& x) { return max_pool2d(x, as_2d(o)); });
}
Tensor avg_pool1d(const Tensor& input, const Pool1dOptions& o) {
  return as_height_one("avg_pool1d", input, [&](const Tensor& x) { return avg_pool2d(x, as_2d(o)); });
}
Tensor adaptive_avg_pool1d(const Tensor& input, std::int64_t output_size) {
  return as_height_one("adaptive_avg_pool1d", input,
                       [&](const Tensor& x) { return adaptive_avg_pool2d(x, {1, output_size}); });
}

}  // namespace rumus
