// cat/stack: each input is copied into its slice of one output; gradients are slices of the output gradient.
#include "rumus/ops/join.hpp"

#include "op_util.hpp"
#include "../backend/pointwise.hpp"

namespace rumus {

Tensor cat(const std::vector<Tensor>& tensors, std::int64_t dim) {
  const char* op = "cat";
  if (tensors.empty()) throw Error("cat: expected a non-empty list of tensors");
  const Tensor& first = tensors[0];
  detail::check_defined(op, first);
  const std::int64_t d = wrap_dim(dim, first.dim(), op);
  if (first.dim() == 0) throw ShapeError("cat: zero-dimensional tensors cannot be concatenated; use stack");
  DType dt = first.dtype();
  Shape shape = first.shape();
  shape[d] = 0;
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    detail::check_same_device(op, first, t);
    bool same = t.dim() == first.dim();
    for (std::int64_t k = 0; same && k < t.dim(); ++k) same = k == d || t.shape()[k] == first.shape()[k];
    if (!same)
      throw ShapeError(fmt::format("cat: expected tensor {} to match {} in every dim but {}, got {}", i,
                                   shape_str(first.shape()), d, shape_str(t.shape())));
    shape[d] += t.shape()[d];
    dt = detail::promote(dt, t.dtype());
  }
  Tensor out = detail::alloc(shape, dt, first.device());
  std::int64_t offset = 0;
  std::vector<std::int64_t> sizes;
  for (const Tensor& t : tensors) {
    const std::int64_t n = t.shape()[d];
    if (t.numel() > 0) {
      Tensor slot = out.narrow(d, offset, n);
      detail::kernel<CopyKernel>("cat", out)(detail::arg(slot), detail::arg(t));  // converts dtype on the way
    }
    sizes.push_back(n);
    offset += n;
  }
  if (autograd::needs_grad(tensors)) {
    std::vector<DType> dtypes;
    for (const Tensor& t : tensors) dtypes.push_back(t.dtype());
    autograd::record(op, tensors, out, [d, sizes, dtypes](const Tensor& g) {
      std::vector<Tensor> grads;
      std::int64_t offset = 0;
      for (std::size_t i = 0; i < sizes.size(); ++i) {
        grads.push_back(is_floating(dtypes[i]) ? g.narrow(d, offset, sizes[i]).to(dtypes[i]) : Tensor());
        offset += sizes[i];
      }
      return grads;
    }, {}, autograd::Backward::differentiable);
  }
  return out;
}

Tensor stack(const std::vector<Tensor>& tensors, std::int64_t dim) {
  if (tensors.empty()) throw Error("stack: expected a non-empty list of tensors");
  detail::check_defined("stack", tensors[0]);
  const std::int64_t d = wrap_dim(dim, tensors[0].dim() + 1, "stack");
  std::vector<Tensor> parts;
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    detail::check_defined("stack", tensors[i]);
    if (tensors[i].shape() != tensors[0].shape())
      throw ShapeError(fmt::format("stack: expected every tensor to have shape {}, got {} at index {}",
                                   shape_str(tensors[0].shape()), shape_str(tensors[i].shape()), i));
    parts.push_back(tensors[i].unsqueeze(d));
  }
  return cat(parts, d);
}

std::vector<Tensor> split(const Tensor& x, std::int64_t split_size, std::int64_t dim) {
  detail::check_defined("split", x);
  if (x.dim() == 0) throw ShapeError("split: expected a tensor with at least one dim, got a 0-d tensor");
  const std::int64_t d = wrap_dim(dim, x.dim(), "split");
  const std::int64_t n = x.shape()[std::size_t(d)];
  if (split_size < 1 && !(split_size == 0 && n == 0))
    throw ValueError(fmt::format("split: expected split_size >= 1, got {} (dim {} of size {})", split_size, dim, n));
  if (n == 0) return {x.narrow(d, 0, 0)};
  std::vector<Tensor> out;
  for (std::int64_t start = 0; start < n; start += split_size) out.push_back(x.narrow(d, start, std::min(split_size, n - start)));
  return out;
}

std::vector<Tensor> chunk(const Tensor& x, std::int64_t chunks, std::int64_t dim) {
  detail::check_defined("chunk", x);
  if (chunks < 1) throw ValueError(fmt::format("chunk: expected chunks >= 1, got {}", chunks));
  if (x.dim() == 0) throw ShapeError("chunk: expected a tensor with at least one dim, got a 0-d tensor");
  const std::int64_t n = x.shape()[std::size_t(wrap_dim(dim, x.dim(), "chunk"))];
  return split(x, std::max<std::int64_t>((n + chunks - 1) / chunks, n == 0 ? 0 : 1), dim);
}

std::vector<Tensor> unbind(const Tensor& x, std::int64_t dim) {
  detail::check_defined("unbind", x);
  if (x.dim() == 0) throw ShapeError("unbind: expected a tensor with at least one dim, got a 0-d tensor");
  const std::int64_t d = wrap_dim(dim, x.dim(), "unbind");
  std::vector<Tensor> out;
  for (std::int64_t i = 0; i < x.shape()[std::size_t(d)]; ++i) out.push_back(x.select(d, i));
  return out;
}

std::vector<Tensor> Tensor::split(std::int64_t size, std::int64_t dim) const { return rumus::split(*this, size, dim); }
std::vector<Tensor> Tensor::chunk(std::int64_t chunks, std::int64_t dim) const { return rumus::chunk(*this, chunks, dim); }
std::vector<Tensor> Tensor::unbind(std::int64_t dim) const { return rumus::unbind(*this, dim); }

}  // namespace rumus
