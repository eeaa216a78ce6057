// Per-element gathers and scatters along one dim (the gather kernel family,
// src/backend/gather.hpp). Any rank and dim flatten to contiguous 3-D views
// [outer, size along dim, inner]; the backward of each op is the other, so
// both are differentiable to any order.
#include "rumus/ops/indexing.hpp"

#include "../backend/gather.hpp"
#include "op_util.hpp"
#include "rumus/ops/compare.hpp"
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
  const Tensor part = narrow_to(src, index, dim, true);
  bool covers = true;  // index spans self off dim: no padding, so scatter into a copy of self
  for (std::int64_t d = 0; d < self.dim(); ++d) covers = covers && (d == dim || index.shape()[d] == self.shape()[d]);
  if (!covers) {
    Tensor added = scatter_into_zeros(op, part, dim, index, n);
    Tensor out = add(self, pad_to(added, self.shape()));
    return self_.dim() == 0 ? out.reshape({}) : out;
  }
  // One copy of self and the scatter into it, where the composition above
  // fills a zero table, scatters and adds self: three passes over self.
  Tensor out = self.detach().clone();
  const auto [outer, inner] = outer_inner(self.shape(), dim);
  const std::int64_t m = index.shape()[dim];
  Tensor values = part.detach().contiguous(), rows = index.contiguous();
  if (values.numel() > 0)
    detail::kernel<ScatterAddKernel>(op, values)(arg(out, Layout::contiguous({outer, n, inner}, out.offset())),
                                                 arg(rows, Layout::contiguous({outer, m, inner}, rows.offset())),
                                                 arg(values, Layout::contiguous({outer, m, inner}, values.offset())));
  if (autograd::needs_grad({&self, &part}))
    autograd::record(op, {self, part}, out, [dim, si = autograd::SavedTensor(rows)](const Tensor& g) {
      return std::vector<Tensor>{g, gather(g, dim, si.get())};
    }, {}, autograd::Backward::differentiable);
  return self_.dim() == 0 ? out.reshape({}) : out;
}

namespace {

// A 1-D (or one-element 0-d) integer index as contiguous i64, checked against n.
Tensor index_vector(const char* op, const Tensor& index, std::int64_t n) {
  detail::check_defined(op, index);
  if (index.dtype() != DType::i64 && index.dtype() != DType::i32)
    throw DTypeError(fmt::format("{}: expected an i64 or i32 index, got {}", op, dtype_name(index.dtype())));
  if (index.dim() > 1)
    throw ShapeError(fmt::format("{}: expected a 1-D index, got shape {}", op, shape_str(index.shape())));
  Tensor rows = index.to(DType::i64).reshape({-1}).contiguous();
  detail::check_indices(op, "index", rows, n);
  return rows;
}

// The 1-D `rows` laid along `dim` of `shape` and repeated over its other dims:
// the per-element index that gather and scatter_add take.
Tensor along(const Tensor& rows, std::int64_t dim, const Shape& shape) {
  Shape one(shape.size(), 1);
  one[dim] = rows.numel();
  return rows.reshape(one).expand(shape).contiguous();
}

// Where scatter writes: 1 at every place index names along dim, else 0.
Tensor written_places(const Tensor& self, std::int64_t dim, const Tensor& index) {
  TensorOptions f32{.dtype = DType::f32, .device = self.device()};
  return gt(scatter_add(zeros(self.shape(), f32), dim, index, ones(index.shape(), f32)), 0.0);
}

// scatter's checks, under its own name, before scatter_add runs.
std::int64_t check_scatter(const Tensor& self, std::int64_t dim, const Tensor& index) {
  const char* op = "scatter";
  detail::check_defined(op, self);
  detail::check_defined(op, index);
  detail::check_same_device(op, self, index);
  const Tensor s = as_1d(self), i = as_1d(index);
  dim = wrap_dim(dim, s.dim(), op);
  check_index(op, s, "self", dim, i, false);
  detail::check_indices(op, "index", i.contiguous(), s.shape()[dim]);
  return dim;
}

}  // namespace

Tensor scatter(const Tensor& self, std::int64_t dim, const Tensor& index, const Tensor& src) {
  dim = check_scatter(self, dim, index);
  detail::check_defined("scatter", src);
  detail::check_same_device("scatter", self, src);
  if (self.dtype() != src.dtype())
    throw DTypeError(fmt::format("scatter: expected src of self's dtype {}, got {}", dtype_name(self.dtype()),
                                 dtype_name(src.dtype())));
  check_index("scatter", as_1d(src), "src", dim, as_1d(index), true);
  Tensor written = scatter_add(zeros_like(self), dim, index, narrow_to(as_1d(src), as_1d(index), dim, true));
  return where(written_places(self, dim, index), written.reshape(self.shape()), self);
}

Tensor scatter(const Tensor& self, std::int64_t dim, const Tensor& index, double value) {
  dim = check_scatter(self, dim, index);
  return masked_fill(self, written_places(self, dim, index), value);
}

Tensor index_select(const Tensor& input, std::int64_t dim, const Tensor& index) {
  const char* op = "index_select";
  detail::check_defined(op, input);
  detail::check_defined(op, index);
  detail::check_same_device(op, input, index);
  const Tensor x = as_1d(input);
  dim = wrap_dim(dim, x.dim(), op);
  Tensor rows = index_vector(op, index, x.shape()[dim]);
  Shape shape = x.shape();
  shape[dim] = rows.numel();
  Tensor out = gather(x, dim, along(rows, dim, shape));
  return input.dim() == 0 && index.dim() == 0 ? out.reshape({}) : out;
}

namespace {
// index_add's and index_copy's operands, checked: self and source as 1-D at
// least, dim wrapped, and the per-element index that scatters source's slices
// into self's entries the 1-D index names along dim.
struct IndexedSource {
  Tensor self, source, index;
  std::int64_t dim;
};

IndexedSource indexed_source(const char* op, const Tensor& self, std::int64_t dim, const Tensor& index,
                             const Tensor& source) {
  for (const Tensor* t : {&self, &index, &source}) detail::check_defined(op, *t);
  detail::check_same_device(op, self, index);
  detail::check_same_device(op, self, source);
  if (self.dtype() != source.dtype())
    throw DTypeError(fmt::format("{}: expected source of self's dtype {}, got {}", op, dtype_name(self.dtype()),
                                 dtype_name(source.dtype())));
  const Tensor s = as_1d(self), src = as_1d(source);
  dim = wrap_dim(dim, s.dim(), op);
  Tensor rows = index_vector(op, index, s.shape()[dim]);
  Shape expected = s.shape();
  expected[dim] = rows.numel();
  if (src.shape() != expected)
    throw ShapeError(fmt::format("{}: expected source of shape {} (self {} with the index's length {} at dim {}), got {}",
                                 op, shape_str(expected), shape_str(self.shape()), rows.numel(), dim,
                                 shape_str(source.shape())));
  return {s, src, along(rows, dim, expected), dim};
}
}  // namespace

Tensor index_add(const Tensor& self, std::int64_t dim, const Tensor& index, const Tensor& source, double alpha) {
  const IndexedSource a = indexed_source("index_add", self, dim, index, source);
  Tensor out = scatter_add(a.self, a.dim, a.index, alpha == 1.0 ? a.source : mul(a.source, alpha));
  return self.dim() == 0 ? out.reshape({}) : out;
}

Tensor index_copy(const Tensor& self, std::int64_t dim, const Tensor& index, const Tensor& source) {
  const IndexedSource a = indexed_source("index_copy", self, dim, index, source);
  Tensor out = scatter(a.self, a.dim, a.index, a.source);
  return self.dim() == 0 ? out.reshape({}) : out;
}

Tensor index_fill(const Tensor& self, std::int64_t dim, const Tensor& index, double value) {
  const char* op = "index_fill";
  detail::check_defined(op, self);
  detail::check_defined(op, index);
  detail::check_same_device(op, self, index);
  const Tensor s = as_1d(self);
  dim = wrap_dim(dim, s.dim(), op);
  Tensor rows = index_vector(op, index, s.shape()[dim]);
  Shape filled = s.shape();
  filled[dim] = rows.numel();
  Tensor out = scatter(s, dim, along(rows, dim, filled), value);
  return self.dim() == 0 ? out.reshape({}) : out;
}

Tensor nonzero(const Tensor& input) {
  detail::check_defined("nonzero", input);
  const std::vector<double> values = input.to_vector<double>();
  const Shape& shape = input.shape();
  const auto rank = std::int64_t(shape.size());
  std::vector<std::int64_t> coords;
  std::vector<std::int64_t> at(std::size_t(rank), 0);
  for (double v : values) {
    if (v != 0.0) coords.insert(coords.end(), at.begin(), at.end());  // NaN counts as nonzero
    for (std::int64_t d = rank - 1; d >= 0; --d) {
      if (++at[d] < shape[d]) break;
      at[d] = 0;
    }
  }
  const auto count = rank == 0 ? std::int64_t(values.size() && values[0] != 0.0) : std::int64_t(coords.size()) / rank;
  return tensor(coords, {count, rank}, {.dtype = DType::i64}).to(input.device());
}

std::vector<Tensor> nonzero_numpy(const Tensor& input) {
  detail::check_defined("nonzero_numpy", input);
  const Tensor at = nonzero(input.dim() == 0 ? input.reshape({1}) : input);
  std::vector<Tensor> out;
  for (std::int64_t d = 0; d < at.size(1); ++d) out.push_back(at.select(1, d).contiguous());
  return out;
}

std::vector<Tensor> where(const Tensor& condition) {
  detail::check_defined("where", condition);
  return nonzero_numpy(condition);
}

Tensor masked_select(const Tensor& input, const Tensor& mask) {
  const char* op = "masked_select";
  detail::check_defined(op, input);
  detail::check_defined(op, mask);
  detail::check_same_device(op, input, mask);
  detail::check_mask(op, "mask", mask);
  const Shape shape = broadcast_shapes(input.shape(), mask.shape(), op);
  const std::vector<std::uint8_t> set = mask.expand(shape).contiguous().to_vector<std::uint8_t>();
  std::vector<std::int64_t> places;
  for (std::size_t i = 0; i < set.size(); ++i)
    if (set[i]) places.push_back(std::int64_t(i));
  Tensor rows = tensor(places, {std::int64_t(places.size())}, {.dtype = DType::i64}).to(input.device());
  return gather(input.expand(shape).reshape({-1}), 0, rows);
}

Tensor take_along_dim(const Tensor& input, const Tensor& indices, std::optional<std::int64_t> dim) {
  const char* op = "take_along_dim";
  detail::check_defined(op, input);
  detail::check_defined(op, indices);
  detail::check_same_device(op, input, indices);
  if (indices.dtype() != DType::i64)
    throw DTypeError(fmt::format("take_along_dim: expected i64 indices, got {}", dtype_name(indices.dtype())));
  if (!dim) {
    Tensor flat = input.reshape({-1}), rows = indices.reshape({-1}).contiguous();
    detail::check_indices(op, "index", rows, flat.numel());
    return gather(flat, 0, rows);
  }
  if (input.dim() != indices.dim())
    throw ShapeError(fmt::format("take_along_dim: expected indices of input's {} dims, got shape {} for input {}",
                                 input.dim(), shape_str(indices.shape()), shape_str(input.shape())));
  const Tensor x = as_1d(input), ix = as_1d(indices);
  const std::int64_t d = wrap_dim(*dim, x.dim(), op);
  Shape xs = x.shape(), is = ix.shape();
  xs[d] = is[d] = 1;
  Shape common = broadcast_shapes(xs, is, op);
  Shape x_shape = common, i_shape = common;
  x_shape[d] = x.shape()[d];
  i_shape[d] = ix.shape()[d];
  Tensor rows = ix.expand(i_shape).contiguous();
  detail::check_indices(op, "index", rows, x_shape[d]);
  Tensor out = gather(x.expand(x_shape), d, rows);
  return input.dim() == 0 ? out.reshape({}) : out;
}

}  // namespace rumus

namespace rumus {

Tensor Tensor::index_select(std::int64_t dim, const Tensor& index) const { return rumus::index_select(*this, dim, index); }
Tensor Tensor::gather(std::int64_t dim, const Tensor& index) const { return rumus::gather(*this, dim, index); }
Tensor Tensor::scatter(std::int64_t dim, const Tensor& index, const Tensor& src) const {
  return rumus::scatter(*this, dim, index, src);
}
Tensor Tensor::scatter(std::int64_t dim, const Tensor& index, double value) const {
  return rumus::scatter(*this, dim, index, value);
}
Tensor Tensor::scatter_add(std::int64_t dim, const Tensor& index, const Tensor& src) const {
  return rumus::scatter_add(*this, dim, index, src);
}
Tensor Tensor::index_add(std::int64_t dim, const Tensor& index, const Tensor& source, double alpha) const {
  return rumus::index_add(*this, dim, index, source, alpha);
}
Tensor Tensor::masked_select(const Tensor& mask) const { return rumus::masked_select(*this, mask); }
Tensor Tensor::nonzero() const { return rumus::nonzero(*this); }
Tensor Tensor::take_along_dim(const Tensor& indices, std::optional<std::int64_t> dim) const {
  return rumus::take_along_dim(*this, indices, dim);
}

}  // namespace rumus
