// cumsum and cumprod: the scan kernels (src/backend/scan.hpp) over any rank
// and dim, flattened to contiguous [outer, n, inner] views. Backwards are
// written in ops (reversed cumsums, cumprods and masks), so they differentiate
// again.
#include "rumus/ops/scan.hpp"

#include "../backend/scan.hpp"
#include "op_util.hpp"
#include "rumus/ops/compare.hpp"
#include "rumus/ops/elementwise.hpp"
#include "rumus/ops/indexing.hpp"
#include "rumus/ops/rearrange.hpp"

namespace rumus {

using detail::arg;

namespace {

Tensor reverse_cumsum(const Tensor& g, std::int64_t dim) { return flip(cumsum(flip(g, {dim}), dim), {dim}); }

// d cumprod / dx applied to g along dim. Before a row's first zero, the
// gradient is the reversed cumsum of g * out over x; at that zero it is the
// same sum with the zero read as 1 (the product of the others); after it,
// every product it reaches holds the zero, so 0.
Tensor cumprod_backward(const Tensor& x, const Tensor& g, std::int64_t dim) {
  Tensor zero = eq(x, 0.0);
  Tensor zeros_so_far = cumsum(zero.to(x.dtype()), dim);
  Tensor before = eq(zeros_so_far, 0.0);
  Tensor first = gt(mul(zero.to(x.dtype()), eq(zeros_so_far, 1.0).to(x.dtype())), 0.5);
  Tensor plain = div(reverse_cumsum(mul(g, cumprod(x, dim)), dim), where(before, x, 1.0));
  Tensor at_zero = reverse_cumsum(mul(g, cumprod(where(first, 1.0, x), dim)), dim);
  return where(before, plain, where(first, at_zero, 0.0));
}

Tensor scan(const char* op, ScanOp kind, const Tensor& x_, std::int64_t dim, std::optional<DType> dtype) {
  detail::check_defined(op, x_);
  const DType out_dtype = dtype ? *dtype : is_floating(x_.dtype()) ? x_.dtype() : DType::i64;
  const Tensor x = (x_.dim() == 0 ? x_.reshape({1}) : x_).to(out_dtype);  // a cast the gradient goes through
  dim = wrap_dim(dim, x.dim(), op);
  const Shape& shape = x.shape();
  std::int64_t outer = 1, inner = 1;
  for (std::int64_t d = 0; d < x.dim(); ++d)
    if (d != dim) (d < dim ? outer : inner) *= shape[d];
  Tensor in = x.detach().contiguous();
  Tensor out = detail::alloc(shape, out_dtype, x.device(), op);
  if (out.numel() > 0) {
    const Layout in3 = Layout::contiguous({outer, shape[dim], inner}, in.offset());
    const Layout out3 = Layout::contiguous({outer, shape[dim], inner}, out.offset());
    detail::kernel<ScanKernel>(op, in)(arg(out, out3), arg(in, in3), kind);
  }
  if (is_floating(out_dtype) && autograd::needs_grad({&x})) {
    if (kind == ScanOp::sum)
      autograd::record(op, {x}, out, [dim](const Tensor& g) { return std::vector<Tensor>{reverse_cumsum(g, dim)}; },
                       {}, autograd::Backward::differentiable);
    else
      autograd::record(op, {x}, out, [dim, sx = autograd::SavedTensor(x)](const Tensor& g) {
        return std::vector<Tensor>{cumprod_backward(sx.get(), g, dim)};
      }, {}, autograd::Backward::differentiable);
  }
  return x_.dim() == 0 ? out.reshape({}) : out;
}

}  // namespace

Tensor cumsum(const Tensor& x, std::int64_t dim, std::optional<DType> dtype) {
  return scan("cumsum", ScanOp::sum, x, dim, dtype);
}

Tensor cumprod(const Tensor& x, std::int64_t dim, std::optional<DType> dtype) {
  return scan("cumprod", ScanOp::prod, x, dim, dtype);
}

namespace {

std::tuple<Tensor, Tensor> cumextreme(const char* op, ExtremeOp kind, const Tensor& x_, std::int64_t dim) {
  detail::check_defined(op, x_);
  const Tensor x = x_.dim() == 0 ? x_.reshape({1}) : x_;
  dim = wrap_dim(dim, x.dim(), op);
  const Shape& shape = x.shape();
  std::int64_t outer = 1, inner = 1;
  for (std::int64_t d = 0; d < x.dim(); ++d)
    if (d != dim) (d < dim ? outer : inner) *= shape[d];
  Tensor in = x.detach().contiguous();
  Tensor values = detail::alloc(shape, x.dtype(), x.device(), op);
  Tensor indices = detail::alloc(shape, DType::i64, x.device(), op);
  if (values.numel() > 0) {
    const Shape three{outer, shape[dim], inner};
    const Layout v3 = Layout::contiguous(three, values.offset()), i3 = Layout::contiguous(three, indices.offset());
    detail::kernel<CumExtremeKernel>(op, in)(arg(values, v3), arg(indices, i3),
                                             arg(in, Layout::contiguous(three, in.offset())), kind);
  }
  if (autograd::needs_grad({&x})) values = gather(x, dim, indices);
  if (x_.dim() == 0) return {values.reshape({}), indices.reshape({})};
  return {values, indices};
}

}  // namespace

std::tuple<Tensor, Tensor> cummax(const Tensor& x, std::int64_t dim) {
  return cumextreme("cummax", ExtremeOp::max, x, dim);
}

std::tuple<Tensor, Tensor> cummin(const Tensor& x, std::int64_t dim) {
  return cumextreme("cummin", ExtremeOp::min, x, dim);
}

}  // namespace rumus

namespace rumus {

Tensor Tensor::cumsum(std::int64_t dim, std::optional<DType> dtype) const { return rumus::cumsum(*this, dim, dtype); }
Tensor Tensor::cumprod(std::int64_t dim, std::optional<DType> dtype) const { return rumus::cumprod(*this, dim, dtype); }
std::tuple<Tensor, Tensor> Tensor::cummax(std::int64_t dim) const { return rumus::cummax(*this, dim); }
std::tuple<Tensor, Tensor> Tensor::cummin(std::int64_t dim) const { return rumus::cummin(*this, dim); }

}  // namespace rumus
