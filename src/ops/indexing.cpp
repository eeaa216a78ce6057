// Per-element gathers and scatters along one dim (the gather kernel family,
// src/backend/gather.hpp). Any rank and dim flatten to contiguous 3-D views
// [outer, size along dim, inner]; the backward of each op is the other, so
// both are differentiable to any order.
#include "rumus/ops/indexing.hpp"

#include "../backend/gather.hpp"
#include "op_util.hpp"
#include "rumus/ops/creation.hpp"
#include "rumus/ops/elementwise.hpp"
#include "rumus/ops/join.hpp"

namespace rumus {

using detail::arg;

namespace {

// The sizes of `shape` before and after `dim`, multiplied out.
std::pair<std::int64_t, std::int64_t> outer_inner(const Shape& shape, std::int64_t dim) {
  std::int64_t outer = 1, inner = 1;
  for (std::int64_t d = 0; d < std::int64_t(shape.size()); ++d) (d < dim ? outer : inner) *= d == dim ? 1 : shape[d];
  return {outer, inner};
}

// index's rules, as PyTorch's: i64, of `t`'s rank, and no larger than `t` off
// `dim` (and along it too where `along` is set, as scatter_add's src).
void check_index(const char* op, const Tensor& t, const char* t_name, std::int64_t dim, const Tensor& index,
                 bool along) {
  if (index.dtype() != DType::i64)
    throw DTypeError(fmt::format("{}: expected an i64 index, got {}", op, dtype_name(index.dtype())));
  if (index.dim() != t.dim())
    throw ShapeError(fmt::format("{}: expected an index of {} dims as {} {}, got {}", op, t.dim(), t_name,
                                 shape_str(t.shape()), shape_str(index.shape())));
  for (std::int64_t d = 0; d < t.dim(); ++d)
    if ((d != dim || along) && index.shape()[d] > t.shape()[d])
      throw ShapeError(fmt::format("{}: index {} is larger than {} {} in dim {}", op, shape_str(index.shape()),
                                   t_name, shape_str(t.shape()), d));
}

// t's leading part with index's extents off `dim` (and along it, if `along`).
Tensor narrow_to(const Tensor& t, const Tensor& index, std::int64_t dim, bool along) {
  Tensor part = t;
  for (std::int64_t d = 0; d < t.dim(); ++d)
    if ((d != dim || along) && index.shape()[d] < t.shape()[d]) part = part.narrow(d, 0, index.shape()[d]);
  return part;
}

// t padded with zeros at the end of each dim up to `shape` (autograd through cat).
Tensor pad_to(Tensor t, const Shape& shape) {
  for (std::int64_t d = 0; d < t.dim(); ++d)
    if (t.shape()[d] < shape[d]) {
      Shape rest = t.shape();
      rest[d] = shape[d] - t.shape()[d];
      t = cat({t, zeros(rest, {.dtype = t.dtype(), .device = t.device()})}, d);
    }
  return t;
}

// Zeros of index's shape but `n` along dim, with src (index's shape) added in
// at index's rows: the scatter both ops share. Differentiable in src.
Tensor scatter_into_zeros(const char* op, const Tensor& src, std::int64_t dim, const Tensor& index, std::int64_t n) {
  Shape shape = index.shape();
  shape[dim] = n;
  const auto [outer, inner] = outer_inner(shape, dim);
  const std::int64_t m = index.shape()[dim];
  Tensor out = zeros(shape, {.dtype = src.dtype(), .device = src.device()});
  Tensor values = src.detach().contiguous(), rows = index.contiguous();
  if (values.numel() > 0)
    detail::kernel<ScatterAddKernel>(op, values)(arg(out, Layout::contiguous({outer, n, inner}, out.offset())),
                                                 arg(rows, Layout::contiguous({outer, m, inner}, rows.offset())),
                                                 arg(values, Layout::contiguous({outer, m, inner}, values.offset())));
  if (autograd::needs_grad({&src}))
    autograd::record(op, {src}, out, [dim, si = autograd::SavedTensor(rows)](const Tensor& g) {
      return std::vector<Tensor>{gather(g, dim, si.get())};
    }, {}, autograd::Backward::differentiable);
  return out;
}

// A 0-d operand as one element of one dim, as PyTorch treats it here.
Tensor as_1d(const Tensor& t) { return t.dim() == 0 ? t.reshape({1}) : t; }

}  // namespace

Tensor gather(const Tensor& input_, std::int64_t dim, const Tensor& index_) {
  const char* op = "gather";
  detail::check_defined(op, input_);
  detail::check_defined(op, index_);
  detail::check_same_device(op, input_, index_);
  const Tensor input = as_1d(input_), index = as_1d(index_);
  dim = wrap_dim(dim, input.dim(), op);
  check_index(op, input, "input", dim, index, false);
  const std::int64_t n = input.shape()[dim], m = index.shape()[dim];
  const auto [outer, inner] = outer_inner(index.shape(), dim);
  Tensor rows = index.contiguous();
  detail::check_indices(op, "index", rows, n);
  Tensor src = narrow_to(input.detach(), index, dim, false).contiguous();
  Tensor out = detail::alloc(index.shape(), input.dtype(), input.device(), op);
  if (out.numel() > 0)
    detail::kernel<GatherKernel>(op, input)(arg(out, Layout::contiguous({outer, m, inner}, out.offset())),
                                            arg(src, Layout::contiguous({outer, n, inner}, src.offset())),
                                            arg(rows, Layout::contiguous({outer, m, inner}, rows.offset())));
  if (autograd::needs_grad({&input}))
    autograd::record(op, {input}, out,
                     [dim, n, shape = input.shape(), si = autograd::SavedTensor(rows)](const Tensor& g) {
                       return std::vector<Tensor>{pad_to(scatter_into_zeros("gather", g, dim, si.get(), n), shape)};
                     },
                     {}, autograd::Backward::differentiable);
  return input_.dim() == 0 ? out.reshape(index_.shape()) : out;
}

Tensor scatter_add(const Tensor& self_, std::int64_t dim, const Tensor& index_, const Tensor& src_) {
  const char* op = "scatter_add";
  for (const Tensor* t : {&self_, &index_, &src_}) detail::check_defined(op, *t);
  detail::check_same_device(op, self_, index_);
  detail::check_same_device(op, self_, src_);
  if (self_.dtype() != src_.dtype())
    throw DTypeError(fmt::format("scatter_add: expected src of self's dtype {}, got {}", dtype_name(self_.dtype()),
                                 dtype_name(src_.dtype())));
  const Tensor self = as_1d(self_), index = as_1d(index_), src = as_1d(src_);
  dim = wrap_dim(dim, self.dim(), op);
  check_index(op, self, "self", dim, index, false);
  check_index(op, src, "src", dim, index, true);
  const std::int64_t n = self.shape()[dim];
  detail::check_indices(op, "index", index.contiguous(), n);
  Tensor added = scatter_into_zeros(op, narrow_to(src, index, dim, true), dim, index, n);
  Tensor out = add(self, pad_to(added, self.shape()));
  return self_.dim() == 0 ? out.reshape({}) : out;
}

}  // namespace rumus
