// Tensor::index and Tensor::index_put_: libtorch's indexing, composed of views
// (select, slice, unsqueeze) and, for tensor indices, one index_select (or
// scatter, to write) along the indexed dims merged into one.
#include "rumus/core/tensor_index.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "rumus/autograd/grad_mode.hpp"
#include "rumus/ops/compare.hpp"
#include "rumus/ops/creation.hpp"
#include "rumus/ops/elementwise.hpp"
#include "rumus/ops/indexing.hpp"
#include "rumus/ops/reduction.hpp"

namespace rumus {

TensorIndex::TensorIndex(const char* text) : kind_(Kind::ellipsis) {
  if (std::string_view(text) != "...")
    throw ValueError(fmt::format("index: expected \"...\" (Ellipsis) as a text index, got \"{}\"", text));
}

namespace {

// A tensor index that is a mask (bool, or u8 as libtorch read it) rather than indices.
bool is_mask(const Tensor& t) { return t.dtype() == DType::boolean || t.dtype() == DType::u8; }

// The dims an index uses up in the indexed tensor.
std::int64_t dims_consumed(const TensorIndex& i) {
  switch (i.kind()) {
    case TensorIndex::Kind::integer:
    case TensorIndex::Kind::slice: return 1;
    case TensorIndex::Kind::tensor: return is_mask(i.tensor()) ? i.tensor().dim() : 1;
    default: return 0;
  }
}

// Integer tensor indices along dims of the (basic-indexed) view.
struct Advanced {
  std::int64_t dim;
  Tensor index;
};

// The basic indices applied (a view of self) and the tensor indices left, by dim of that view.
struct Resolved {
  Tensor view;
  std::vector<Advanced> advanced;
};

Resolved resolve(const char* op, const Tensor& self, const std::vector<TensorIndex>& indices) {
  if (!self.defined()) throw ValueError(fmt::format("{}: expected a defined tensor", op));
  std::int64_t consumed = 0, ellipses = 0;
  for (const TensorIndex& i : indices) {
    consumed += dims_consumed(i);
    ellipses += i.kind() == TensorIndex::Kind::ellipsis;
  }
  if (ellipses > 1) throw ValueError(fmt::format("{}: an index can only have a single ellipsis, got {}", op, ellipses));
  if (consumed > self.dim())
    throw ShapeError(fmt::format("{}: too many indices for a tensor of {} dims: {} given", op, self.dim(), consumed));
  Resolved r{self, {}};
  std::int64_t d = 0, source_dim = 0, left = consumed;  // d: position in the view; source_dim: in self
  for (const TensorIndex& i : indices) {
    Tensor& y = r.view;
    switch (i.kind()) {
      case TensorIndex::Kind::integer: {
        const std::int64_t size = y.size(d), at = i.integer() < 0 ? i.integer() + size : i.integer();
        if (at < 0 || at >= size)
          throw ShapeError(fmt::format("{}: index {} is out of bounds for dim {} of size {}", op, i.integer(), source_dim, size));
        y = y.select(d, at);
        ++source_dim, --left;
        break;
      }
      case TensorIndex::Kind::slice: {
        const indexing::Slice& s = i.slice();
        const std::int64_t size = y.size(d), step = s.step.value_or(1);
        if (step <= 0) throw ValueError(fmt::format("{}: expected a slice step > 0, got {}", op, step));
        auto bound = [size](std::optional<std::int64_t> v, std::int64_t fallback) {
          if (!v) return fallback;
          const std::int64_t b = *v < 0 ? *v + size : *v;
          return std::clamp<std::int64_t>(b, 0, size);
        };
        const std::int64_t start = bound(s.start, 0), stop = std::max(start, bound(s.stop, size));
        y = y.slice(d, start, stop, step);
        ++d, ++source_dim, --left;
        break;
      }
      case TensorIndex::Kind::none: y = y.unsqueeze(d++); break;
      case TensorIndex::Kind::boolean:
        y = y.unsqueeze(d);
        if (!i.boolean()) y = y.narrow(d, 0, 0);
        ++d;
        break;
      case TensorIndex::Kind::ellipsis: {
        const std::int64_t skip = y.dim() - d - left;
        d += skip, source_dim += skip;
        break;
      }
      case TensorIndex::Kind::tensor: {
        const Tensor& t = i.tensor();
        if (!t.defined() || is_floating(t.dtype()))
          throw DTypeError(fmt::format("{}: tensors used as indices must be integer, or bool or u8 (a mask), got {}", op,
                                       t.defined() ? std::string(dtype_name(t.dtype())) : "an undefined tensor"));
        if (is_mask(t)) {  // a mask over the next t.dim() dims: the positions of its set elements
          for (std::int64_t k = 0; k < t.dim(); ++k)
            if (t.size(k) != y.size(d + k))
              throw ShapeError(fmt::format("{}: the mask of shape {} does not match the indexed shape {} at dim {}", op,
                                           shape_str(t.shape()), shape_str(y.shape()), source_dim + k));
          const Tensor where_set = nonzero(t).to(y.device());  // [count, t.dim()]
          for (std::int64_t k = 0; k < t.dim(); ++k) r.advanced.push_back({d + k, where_set.select(1, k)});
          d += t.dim(), source_dim += t.dim(), left -= t.dim();
        } else {
          r.advanced.push_back({d, t.to(DType::i64).to(y.device())});
          ++d, ++source_dim, --left;
        }
        break;
      }
    }
  }
  return r;
}

// The tensor indices of `r` as one linear index into their dims merged: the
// view permuted so that those dims sit together at `at` (in place when they
// are adjacent, first otherwise, as PyTorch places the result's dims).
struct Merged {
  Tensor permuted;   // the view with the indexed dims at at .. at + k - 1
  std::int64_t at;   // where they start
  Shape broadcast;   // the indices' common shape
  Tensor linear;     // i64, flattened broadcast shape: the positions in the merged dim
};

Merged merge(const char* op, const Resolved& r) {
  const std::vector<Advanced>& adv = r.advanced;
  Shape b = adv[0].index.shape();
  for (const Advanced& a : adv) b = broadcast_shapes(b, a.index.shape(), op);
  bool adjacent = true;
  for (std::size_t j = 1; j < adv.size(); ++j) adjacent = adjacent && adv[j].dim == adv[j - 1].dim + 1;
  Merged m{r.view, adjacent ? adv[0].dim : 0, b, Tensor()};
  if (!adjacent) {
    std::vector<std::int64_t> order;
    for (const Advanced& a : adv) order.push_back(a.dim);
    for (std::int64_t k = 0; k < r.view.dim(); ++k)
      if (std::find(order.begin(), order.end(), k) == order.end()) order.push_back(k);
    m.permuted = r.view.permute(order);
  }
  NoGradGuard no_grad;  // positions carry no gradient
  Tensor linear = zeros(b, {.dtype = DType::i64, .device = r.view.device()});
  for (std::size_t j = 0; j < adv.size(); ++j) {
    const std::int64_t size = m.permuted.size(m.at + std::int64_t(j));
    Tensor idx = adv[j].index.expand(b);
    if (idx.numel() > 0) {
      const std::int64_t lo = min(idx).item<std::int64_t>(), hi = max(idx).item<std::int64_t>();
      if (lo < -size || hi >= size)
        throw ShapeError(fmt::format("{}: index {} is out of bounds for an indexed dim of size {}", op,
                                     lo < -size ? lo : hi, size));
    }
    idx = add(idx, mul(lt(idx, 0.0).to(DType::i64), Scalar(size)));  // negative indices count from the end
    linear = add(mul(linear, Scalar(size)), idx);
  }
  m.linear = linear.reshape({linear.numel()});
  return m;
}

// permuted with its k indexed dims from `at` merged into one.
Shape merged_shape(const Merged& m, std::size_t k) {
  const Shape& s = m.permuted.shape();
  Shape out(s.begin(), s.begin() + m.at);
  std::int64_t n = 1;
  for (std::size_t j = 0; j < k; ++j) n *= s[std::size_t(m.at) + j];
  out.push_back(n);
  out.insert(out.end(), s.begin() + m.at + std::int64_t(k), s.end());
  return out;
}

// The result's shape: the indexed dims replaced by the indices' broadcast shape.
Shape result_shape(const Merged& m, std::size_t k) {
  const Shape& s = m.permuted.shape();
  Shape out(s.begin(), s.begin() + m.at);
  out.insert(out.end(), m.broadcast.begin(), m.broadcast.end());
  out.insert(out.end(), s.begin() + m.at + std::int64_t(k), s.end());
  return out;
}

}  // namespace

Tensor Tensor::index(const std::vector<TensorIndex>& indices) const {
  Resolved r = resolve("index", *this, indices);
  if (r.advanced.empty()) return r.view;
  const Merged m = merge("index", r);
  const std::size_t k = r.advanced.size();
  const Tensor picked = rumus::index_select(m.permuted.reshape(merged_shape(m, k)), m.at, m.linear);
  return picked.reshape(result_shape(m, k));
}

Tensor& Tensor::index_put_(const std::vector<TensorIndex>& indices, const Tensor& value) {
  Resolved r = resolve("index_put_", *this, indices);
  if (!value.defined()) throw ValueError("index_put_: expected a defined value");
  if (r.advanced.empty()) {
    r.view.copy_(value.to(dtype()).to(device()).expand(r.view.shape()));
    return *this;
  }
  Merged m = merge("index_put_", r);
  const std::size_t k = r.advanced.size();
  // The values in the indexed positions' layout, then written by a scatter
  // along the merged dim into a copy, which goes back through the view.
  const Shape target = result_shape(m, k), merged = merged_shape(m, k);
  Shape flat = merged;
  flat[std::size_t(m.at)] = m.linear.numel();
  const Tensor v = value.to(dtype()).to(device()).expand(target).reshape(flat);
  Shape positions(flat.size(), 1);
  positions[std::size_t(m.at)] = m.linear.numel();
  const Tensor where_to = m.linear.reshape(positions).expand(flat).contiguous();
  const Tensor written = rumus::scatter(m.permuted.reshape(merged), m.at, where_to, v);
  m.permuted.copy_(written.reshape(m.permuted.shape()));
  return *this;
}

Tensor& Tensor::index_put_(const std::vector<TensorIndex>& indices, double value) {
  return index_put_(indices, full({}, value, {.dtype = dtype(), .device = device()}));
}

}  // namespace rumus
