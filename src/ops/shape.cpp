// Views: new layouts over the same storage. Recorded on the tape when the input requires grad.
#include <algorithm>
#include <numeric>
#include <optional>

#include "op_util.hpp"
#include "rumus/ops/creation.hpp"
#include "rumus/ops/indexing.hpp"
#include "rumus/ops/rearrange.hpp"
#include "rumus/ops/reduction.hpp"

namespace rumus {

namespace {

Tensor make_view(const Tensor& x, Layout layout, const char* name, autograd::BackwardFn backward,
                 autograd::EmbedFn embed = {}) {
  note_captured_tensor(x);  // a captured kernel that reads the view depends on x's memory
  Tensor out(x.storage_ptr(), std::move(layout), x.dtype());
  if (autograd::needs_grad({&x}))
    autograd::record(name, {x}, out, std::move(backward), std::move(embed), autograd::Backward::differentiable);
  return out;
}

// The gradient of a strided part of a tensor shaped `in_shape`: g's rows along
// d added at start, start + step, ... of zeros. With ops (scatter_add), so
// that create_graph records it; otherwise by a copy into the part.
Tensor part_gradient(const Shape& in_shape, std::int64_t d, std::int64_t start, std::int64_t step, const Tensor& g) {
  if (!grad_enabled()) {
    Tensor gi = zeros(in_shape, {.dtype = g.dtype(), .device = g.device()});
    gi.slice(d, start, in_shape[d], step).slice(d, 0, g.shape()[d]).copy_(g);
    return gi;
  }
  Shape along(g.shape().size(), 1);
  along[d] = g.shape()[d];
  Tensor rows = arange(double(start), double(start + along[d] * step), double(step), {.dtype = DType::i64, .device = g.device()});
  rows = rows.reshape(along).expand(g.shape()).contiguous();
  return scatter_add(zeros(in_shape, {.dtype = g.dtype(), .device = g.device()}), d, rows, g);
}

Shape infer_shape(const Shape& shape, std::int64_t numel, const char* op) {
  Shape out = shape;
  std::int64_t known = 1, infer = -1;
  for (std::size_t i = 0; i < out.size(); ++i) {
    if (out[i] == -1) {
      if (infer >= 0) throw ShapeError(fmt::format("{}: only one dim can be -1, got {}", op, shape_str(shape)));
      infer = std::int64_t(i);
    } else if (out[i] < 0) {
      throw ShapeError(fmt::format("{}: invalid dim {} in {}", op, out[i], shape_str(shape)));
    } else if (__builtin_mul_overflow(known, out[i], &known)) {
      throw ShapeError(fmt::format("{}: shape {} has more elements than an int64 can count", op, shape_str(shape)));
    }
  }
  if (infer >= 0) {
    if (known == 0 || numel % known != 0)
      throw ShapeError(fmt::format("{}: shape {} is invalid for {} elements", op, shape_str(shape), numel));
    out[infer] = numel / known;
  } else if (known != numel) {
    throw ShapeError(fmt::format("{}: shape {} is invalid for {} elements", op, shape_str(shape), numel));
  }
  return out;
}

// Strides that view `old` as `shape` without copying, if any exist.
std::optional<Shape> view_strides(const Layout& old, const Shape& shape) {
  if (old.numel() == 0 || old.shape.empty()) return contiguous_strides(shape);
  Shape strides(shape.size());
  std::int64_t view_d = std::int64_t(shape.size()) - 1;
  std::int64_t chunk_stride = old.strides.back(), tensor_numel = 1, view_numel = 1;
  for (std::int64_t d = old.dim() - 1; d >= 0; --d) {
    tensor_numel *= old.shape[d];
    bool chunk_ends = d == 0 || (old.shape[d - 1] != 1 && old.strides[d - 1] != tensor_numel * chunk_stride);
    if (!chunk_ends) continue;
    while (view_d >= 0 && (view_numel < tensor_numel || shape[view_d] == 1)) {
      strides[view_d] = view_numel * chunk_stride;
      view_numel *= shape[view_d];
      --view_d;
    }
    if (view_numel != tensor_numel) return std::nullopt;
    if (d > 0) {
      chunk_stride = old.strides[d - 1];
      tensor_numel = 1;
      view_numel = 1;
    }
  }
  if (view_d != -1) return std::nullopt;
  return strides;
}

autograd::BackwardFn reshape_back(Shape in_shape) {
  return [in_shape](const Tensor& g) { return std::vector<Tensor>{g.reshape(in_shape)}; };
}

}  // namespace

Tensor Tensor::view(const Shape& shape_in) const {
  Shape shape = infer_shape(shape_in, numel(), "view");
  auto strides = view_strides(layout(), shape);
  if (!strides)
    throw ShapeError(fmt::format("view: cannot view shape {} with strides {} as {} without a copy; use reshape",
                                 shape_str(this->shape()), shape_str(this->strides()), shape_str(shape)));
  return make_view(*this, Layout{shape, *strides, offset()}, "view", reshape_back(this->shape()));
}

Tensor Tensor::reshape(const Shape& shape_in) const {
  Shape shape = infer_shape(shape_in, numel(), "reshape");
  if (auto strides = view_strides(layout(), shape))
    return make_view(*this, Layout{shape, *strides, offset()}, "reshape", reshape_back(this->shape()));
  return contiguous().view(shape);
}

Tensor Tensor::transpose(std::int64_t d0, std::int64_t d1) const {
  d0 = wrap_dim(d0, dim(), "transpose");
  d1 = wrap_dim(d1, dim(), "transpose");
  Layout l = layout();
  if (dim() > 0) {
    std::swap(l.shape[d0], l.shape[d1]);
    std::swap(l.strides[d0], l.strides[d1]);
  }
  return make_view(*this, std::move(l), "transpose",
                   [d0, d1](const Tensor& g) { return std::vector<Tensor>{g.transpose(d0, d1)}; });
}

Tensor Tensor::t() const {
  if (dim() != 2) throw ShapeError(fmt::format("t: expected a 2-D tensor, got shape {}", shape_str(shape())));
  return transpose(0, 1);
}

Tensor Tensor::permute(const std::vector<std::int64_t>& dims_in) const {
  if (std::int64_t(dims_in.size()) != dim())
    throw ShapeError(fmt::format("permute: expected {} dims, got {}", dim(), dims_in.size()));
  std::vector<std::int64_t> dims(dims_in.size()), inverse(dims_in.size());
  std::vector<char> seen(dims_in.size(), 0);
  Layout l = layout();
  for (std::size_t i = 0; i < dims.size(); ++i) {
    dims[i] = wrap_dim(dims_in[i], dim(), "permute");
    if (seen[dims[i]]++) throw ShapeError(fmt::format("permute: dim {} repeated", dims[i]));
    l.shape[i] = shape()[dims[i]];
    l.strides[i] = strides()[dims[i]];
    inverse[dims[i]] = std::int64_t(i);
  }
  return make_view(*this, std::move(l), "permute",
                   [inverse](const Tensor& g) { return std::vector<Tensor>{g.permute(inverse)}; });
}

Tensor Tensor::slice(std::int64_t d, std::int64_t start, std::int64_t end, std::int64_t step) const {
  d = wrap_dim(d, dim(), "slice");
  if (step <= 0) throw ShapeError(fmt::format("slice: expected a positive step, got {}", step));
  const auto n = shape()[d];
  if (start < 0) start += n;
  if (end < 0) end += n;
  start = std::clamp<std::int64_t>(start, 0, n);
  end = std::clamp<std::int64_t>(end, start, n);
  Layout l = layout();
  l.offset += start * l.strides[d];
  l.shape[d] = (end - start + step - 1) / step;
  l.strides[d] *= step;
  return make_view(
      *this, std::move(l), "slice",
      [in_shape = shape(), d, start, step](const Tensor& g) {
        return std::vector<Tensor>{part_gradient(in_shape, d, start, step, g)};
      },
      [d, start, end, step](const Tensor& t) { return t.slice(d, start, end, step); });
}

Tensor Tensor::narrow(std::int64_t d, std::int64_t start, std::int64_t length) const {
  d = wrap_dim(d, dim(), "narrow");
  if (start < 0) start += shape()[d];
  std::int64_t end = 0;
  const bool overflow = __builtin_add_overflow(start, length, &end);  // checked: a wrapped end passes the test
  if (start < 0 || length < 0 || overflow || end > shape()[d])
    throw ShapeError(fmt::format("narrow: range [{}, {}) out of bounds for dim {} of size {}", start,
                                 overflow ? fmt::format("{} + {}", start, length) : std::to_string(end), d,
                                 shape()[d]));
  return slice(d, start, end);
}

Tensor Tensor::select(std::int64_t d, std::int64_t index) const {
  d = wrap_dim(d, dim(), "select");
  const auto n = shape()[d];
  if (index < -n || index >= n)
    throw ShapeError(fmt::format("select: index {} out of range for dim {} of size {}", index, d, n));
  if (index < 0) index += n;
  Layout l = layout();
  l.offset += index * l.strides[d];
  l.shape.erase(l.shape.begin() + d);
  l.strides.erase(l.strides.begin() + d);
  return make_view(
      *this, std::move(l), "select",
      [in_shape = shape(), d, index](const Tensor& g) {
        return std::vector<Tensor>{part_gradient(in_shape, d, index, 1, g.unsqueeze(d))};
      },
      [d, index](const Tensor& t) { return t.select(d, index); });
}

Tensor Tensor::expand(const Shape& shape_in) const {
  if (shape_in.size() < shape().size())
    throw ShapeError(fmt::format("expand: target {} has fewer dims than {}", shape_str(shape_in), shape_str(shape())));
  Shape target = shape_in;
  const std::size_t lead = target.size() - shape().size();
  for (std::size_t i = 0; i < target.size(); ++i) {
    if (i >= lead && target[i] == -1) target[i] = shape()[i - lead];
    if (i >= lead && shape()[i - lead] != 1 && shape()[i - lead] != target[i])
      throw ShapeError(fmt::format("expand: cannot expand {} to {} (dim {})", shape_str(shape()), shape_str(shape_in), i));
    if (target[i] < 0) throw ShapeError(fmt::format("expand: invalid dim {} in {}", target[i], shape_str(shape_in)));
  }
  std::int64_t n = 1;
  for (auto d : target)
    if (__builtin_mul_overflow(n, d, &n))
      throw ShapeError(fmt::format("expand: shape {} has more elements than an int64 can count", shape_str(shape_in)));
  if (target == shape()) return *this;
  return make_view(*this, detail::broadcast_layout(*this, target), "expand",
                   [in_shape = shape()](const Tensor& g) { return std::vector<Tensor>{sum_to(g, in_shape)}; });
}

Tensor Tensor::squeeze() const {
  Shape s;
  for (auto d : shape())
    if (d != 1) s.push_back(d);
  return reshape(s);
}

Tensor Tensor::squeeze(std::int64_t d) const {
  d = wrap_dim(d, dim(), "squeeze");
  if (dim() == 0 || shape()[d] != 1) return *this;
  Layout l = layout();
  l.shape.erase(l.shape.begin() + d);
  l.strides.erase(l.strides.begin() + d);
  return make_view(*this, std::move(l), "squeeze", reshape_back(shape()));
}

Tensor Tensor::unsqueeze(std::int64_t d) const {
  d = wrap_dim(d, dim() + 1, "unsqueeze");
  Layout l = layout();
  std::int64_t stride = d < dim() ? l.strides[d] * l.shape[d] : 1;
  l.shape.insert(l.shape.begin() + d, 1);
  l.strides.insert(l.strides.begin() + d, stride);
  return make_view(*this, std::move(l), "unsqueeze", reshape_back(shape()));
}

Tensor Tensor::flatten(std::int64_t start, std::int64_t end) const {
  if (dim() == 0) return reshape({1});
  start = wrap_dim(start, dim(), "flatten");
  end = wrap_dim(end, dim(), "flatten");
  if (start > end) throw ShapeError(fmt::format("flatten: start dim {} is after end dim {}", start, end));
  Shape s(shape().begin(), shape().begin() + start);
  std::int64_t n = 1;
  for (auto i = start; i <= end; ++i) n *= shape()[i];
  s.push_back(n);
  s.insert(s.end(), shape().begin() + end + 1, shape().end());
  return reshape(s);
}

namespace {

// The element positions `layout` reads, in its row-major order, as an i64
// tensor of its shape on `device`.
Tensor positions(const Layout& layout, Device device) {
  const auto rank = std::int64_t(layout.shape.size());
  std::vector<std::int64_t> out;
  out.reserve(std::size_t(layout.numel()));
  std::vector<std::int64_t> at(std::size_t(rank), 0);
  for (std::int64_t i = 0, n = layout.numel(); i < n; ++i) {
    std::int64_t p = layout.offset;
    for (std::int64_t d = 0; d < rank; ++d) p += at[d] * layout.strides[d];
    out.push_back(p);
    for (std::int64_t d = rank - 1; d >= 0; --d) {
      if (++at[d] < layout.shape[d]) break;
      at[d] = 0;
    }
  }
  return tensor(out, layout.shape, {.dtype = DType::i64}).to(device);
}

// g, read through the strided `read` of a flat buffer of n elements, added
// back at those places (overlaps add up): differentiable in g (scatter_add).
Tensor scatter_flat(const Tensor& g, const Layout& read, std::int64_t n) {
  return scatter_add(zeros({n}, {.dtype = g.dtype(), .device = g.device()}), 0,
                     positions(read, g.device()).reshape({-1}), g.reshape({-1}));
}

}  // namespace

Tensor diagonal(const Tensor& x, std::int64_t offset, std::int64_t dim1, std::int64_t dim2) {
  const char* op = "diagonal";
  detail::check_defined(op, x);
  if (x.dim() < 2)
    throw ShapeError(fmt::format("diagonal: expected a tensor of at least 2 dims, got shape {}", shape_str(x.shape())));
  dim1 = wrap_dim(dim1, x.dim(), op);
  dim2 = wrap_dim(dim2, x.dim(), op);
  if (dim1 == dim2) throw ShapeError(fmt::format("diagonal: expected two different dims, got {} and {}", dim1, dim2));
  // The same diagonal of x's own layout (the view) and of a contiguous x (where its gradient goes).
  auto diagonal_of = [&](const Layout& in) {
    const std::int64_t n1 = in.shape[dim1], n2 = in.shape[dim2];
    const std::int64_t length = std::max<std::int64_t>(0, offset >= 0 ? std::min(n1, n2 - offset) : std::min(n1 + offset, n2));
    Layout l;
    l.offset = in.offset;
    if (length > 0) l.offset += offset >= 0 ? offset * in.strides[dim2] : -offset * in.strides[dim1];
    for (std::int64_t d = 0; d < x.dim(); ++d)
      if (d != dim1 && d != dim2) {
        l.shape.push_back(in.shape[d]);
        l.strides.push_back(in.strides[d]);
      }
    l.shape.push_back(length);
    l.strides.push_back(in.strides[dim1] + in.strides[dim2]);
    return l;
  };
  const Layout read = diagonal_of(Layout::contiguous(x.shape(), 0));
  return make_view(x, diagonal_of(x.layout()), op, [read, shape = x.shape()](const Tensor& g) {
    return std::vector<Tensor>{scatter_flat(g, read, numel_of(shape)).reshape(shape)};
  });
}

Tensor as_strided(const Tensor& x, const Shape& size, const Shape& stride, std::optional<std::int64_t> storage_offset) {
  const char* op = "as_strided";
  detail::check_defined(op, x);
  if (size.size() != stride.size())
    throw ShapeError(fmt::format("as_strided: expected as many strides as sizes, got size {} and stride {}",
                                 shape_str(size), shape_str(stride)));
  const std::int64_t offset = storage_offset.value_or(x.offset());
  if (offset < 0) throw ShapeError(fmt::format("as_strided: expected a storage offset of at least 0, got {}", offset));
  std::int64_t last = offset, n = 1;
  for (std::size_t d = 0; d < size.size(); ++d) {
    if (size[d] < 0 || stride[d] < 0)
      throw ShapeError(fmt::format("as_strided: expected sizes and strides of at least 0, got size {} and stride {}",
                                   shape_str(size), shape_str(stride)));
    n *= size[d];
    last += (size[d] - 1) * stride[d];
  }
  const auto elements = std::int64_t(x.storage().nbytes() / dtype_size(x.dtype()));
  if (n > 0 && last >= elements)
    throw ShapeError(fmt::format("as_strided: size {}, stride {} and storage offset {} reach element {}, past the "
                                 "storage's {} elements",
                                 shape_str(size), shape_str(stride), offset, last, elements));
  Layout view{size, stride, offset};
  // The gradient: g added at the storage places the view reads, then read
  // back where x lies in the storage (as PyTorch's, for an x whose elements
  // do not overlap).
  return make_view(x, view, op, [view, in = x.layout(), elements](const Tensor& g) {
    Tensor flat = scatter_flat(g, view, elements);
    return std::vector<Tensor>{gather(flat, 0, positions(in, g.device()).reshape({-1})).reshape(in.shape)};
  });
}

}  // namespace rumus

namespace rumus {

Tensor Tensor::diagonal(std::int64_t offset, std::int64_t dim1, std::int64_t dim2) const {
  return rumus::diagonal(*this, offset, dim1, dim2);
}
Tensor Tensor::as_strided(const Shape& size, const Shape& stride, std::optional<std::int64_t> storage_offset) const {
  return rumus::as_strided(*this, size, stride, storage_offset);
}

}  // namespace rumus
