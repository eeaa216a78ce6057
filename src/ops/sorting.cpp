// sort, argsort, topk, kthvalue: the sort kernel (src/backend/sort.hpp) over
// the rows of the sorted dim moved last. Values that need a gradient are read
// again as gather(x, dim, indices), whose backward is a scatter_add: twice
// differentiable.
#include "rumus/ops/sorting.hpp"

#include "../backend/sort.hpp"
#include "op_util.hpp"
#include "rumus/ops/compare.hpp"
#include "rumus/ops/elementwise.hpp"
#include "rumus/ops/indexing.hpp"
#include "rumus/ops/reduction.hpp"
#include "rumus/ops/rearrange.hpp"

namespace rumus {

using detail::arg;

namespace {

// (values, indices) of x sorted along dim, no autograd; x has at least one dim.
std::tuple<Tensor, Tensor> sorted(const char* op, const Tensor& x, std::int64_t dim, bool descending) {
  const std::int64_t n = x.shape()[dim];
  Tensor values = detail::alloc(x.shape(), x.dtype(), x.device(), op);
  Tensor indices = detail::alloc(x.shape(), DType::i64, x.device(), op);
  if (x.numel() == 0) return {values, indices};
  Tensor last = movedim(x.detach(), dim, -1).contiguous();
  const Shape moved = last.shape();
  const std::int64_t rows = x.numel() / n;
  Tensor v = detail::alloc({rows, n}, x.dtype(), x.device(), op);
  Tensor i = detail::alloc({rows, n}, DType::i64, x.device(), op);
  const Layout rows_view = Layout::contiguous({rows, n}, last.offset());
  detail::kernel<SortKernel>(op, last)(arg(v), arg(i), arg(last, rows_view), descending);
  return {movedim(v.view(moved), -1, dim).contiguous(), movedim(i.view(moved), -1, dim).contiguous()};
}

// sort, for every op here: x's 0-d case as one element, values recorded as a gather.
std::tuple<Tensor, Tensor> sort_values(const char* op, const Tensor& x_, std::int64_t dim, bool descending) {
  detail::check_defined(op, x_);
  const Tensor x = x_.dim() == 0 ? x_.reshape({1}) : x_;
  dim = wrap_dim(dim, x.dim(), op);
  auto [values, indices] = sorted(op, x, dim, descending);
  if (autograd::needs_grad({&x})) values = gather(x, dim, indices);
  if (x_.dim() == 0) return {values.reshape({}), indices.reshape({})};
  return {values, indices};
}

}  // namespace

std::tuple<Tensor, Tensor> sort(const Tensor& x, std::int64_t dim, bool descending) {
  return sort_values("sort", x, dim, descending);
}

std::tuple<Tensor, Tensor> sort(const Tensor& x, std::optional<bool>, std::int64_t dim, bool descending) {
  return sort_values("sort", x, dim, descending);
}

Tensor argsort(const Tensor& x, std::int64_t dim, bool descending) {
  return std::get<1>(sort_values("argsort", x.detach(), dim, descending));
}

Tensor argsort(const Tensor& x, bool, std::int64_t dim, bool descending) { return argsort(x, dim, descending); }

std::tuple<Tensor, Tensor> topk(const Tensor& x_, std::int64_t k, std::int64_t dim, bool largest, bool) {
  const char* op = "topk";
  detail::check_defined(op, x_);
  const Tensor x = x_.dim() == 0 ? x_.reshape({1}) : x_;
  dim = wrap_dim(dim, x.dim(), op);
  const std::int64_t n = x.shape()[dim];
  if (k < 0 || k > n)
    throw ShapeError(fmt::format("topk: k ({}) is out of range for dim {} of size {}", k, dim, n));
  Tensor indices, values;
  if (detail::has_kernels<TopkKernel>(x) && x.numel() > 0) {  // select k without sorting the rest
    const Tensor last = movedim(x.detach(), dim, -1).contiguous();
    Shape moved = last.shape();
    moved.back() = k;
    const std::int64_t rows = x.numel() / n;
    Tensor v = detail::alloc({rows, k}, x.dtype(), x.device(), op);
    Tensor i = detail::alloc({rows, k}, DType::i64, x.device(), op);
    detail::kernel<TopkKernel>(op, last)(arg(v), arg(i), arg(last, Layout::contiguous({rows, n}, last.offset())), k,
                                         largest);
    indices = movedim(i.view(moved), -1, dim).contiguous();
    values = movedim(v.view(moved), -1, dim).contiguous();
  } else {
    auto [all, order] = sorted(op, x, dim, largest);
    indices = order.narrow(dim, 0, k).contiguous();
    values = all.narrow(dim, 0, k).contiguous();
  }
  if (autograd::needs_grad({&x})) values = gather(x, dim, indices);
  if (x_.dim() == 0) return {values.reshape({}), indices.reshape({})};
  return {values, indices};
}

std::tuple<Tensor, Tensor> kthvalue(const Tensor& x_, std::int64_t k, std::int64_t dim, bool keepdim) {
  const char* op = "kthvalue";
  detail::check_defined(op, x_);
  const Tensor x = x_.dim() == 0 ? x_.reshape({1}) : x_;
  dim = wrap_dim(dim, x.dim(), op);
  const std::int64_t n = x.shape()[dim];
  if (k < 1 || k > n)
    throw ShapeError(fmt::format("kthvalue: k ({}) is out of range for dim {} of size {} (k counts from 1)", k, dim, n));
  auto [all, order] = sorted(op, x, dim, false);
  Tensor indices = order.narrow(dim, k - 1, 1).contiguous();
  Tensor values = autograd::needs_grad({&x}) ? gather(x, dim, indices) : all.narrow(dim, k - 1, 1).contiguous();
  if (x_.dim() == 0) return {values.reshape({}), indices.reshape({})};
  if (!keepdim) return {values.squeeze(dim), indices.squeeze(dim)};
  return {values, indices};
}

std::tuple<Tensor, Tensor> median(const Tensor& x_, std::int64_t dim, bool keepdim) {
  const char* op = "median";
  detail::check_defined(op, x_);
  const Tensor x = x_.dim() == 0 ? x_.reshape({1}) : x_;
  dim = wrap_dim(dim, x.dim(), op);
  const std::int64_t n = x.shape()[dim];
  if (n == 0) throw ShapeError(fmt::format("median: expected a non-empty dim, got dim {} of size 0", dim));
  auto [all, order] = sorted(op, x, dim, false);
  // NaN sorts last, so a row's first NaN lies at n - (its NaN count).
  Tensor nans = sum(isnan(x.detach()).to(DType::f32), {dim}, true);
  Tensor at = where(gt(nans, 0.0), sub(double(n), nans), double((n - 1) / 2)).to(DType::i64);
  Tensor indices = gather(order, dim, at);
  Tensor values = gather(x, dim, indices);
  if (x_.dim() == 0) return {values.reshape({}), indices.reshape({})};
  if (!keepdim) return {values.squeeze(dim), indices.squeeze(dim)};
  return {values, indices};
}

Tensor median(const Tensor& x) {
  detail::check_defined("median", x);
  if (x.numel() == 0) throw ShapeError("median: expected a non-empty tensor, got shape " + shape_str(x.shape()));
  return std::get<0>(median(x.reshape({-1}), 0)).reshape({});
}

}  // namespace rumus

namespace rumus {

std::tuple<Tensor, Tensor> Tensor::sort(std::int64_t dim, bool descending) const {
  return rumus::sort(*this, dim, descending);
}
Tensor Tensor::argsort(std::int64_t dim, bool descending) const { return rumus::argsort(*this, dim, descending); }
std::tuple<Tensor, Tensor> Tensor::topk(std::int64_t k, std::int64_t dim, bool largest, bool sorted) const {
  return rumus::topk(*this, k, dim, largest, sorted);
}
std::tuple<Tensor, Tensor> Tensor::kthvalue(std::int64_t k, std::int64_t dim, bool keepdim) const {
  return rumus::kthvalue(*this, k, dim, keepdim);
}
std::tuple<Tensor, Tensor> Tensor::median(std::int64_t dim, bool keepdim) const {
  return rumus::median(*this, dim, keepdim);
}
Tensor Tensor::median() const { return rumus::median(*this); }

}  // namespace rumus
