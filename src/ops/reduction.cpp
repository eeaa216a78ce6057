#include "rumus/ops/reduction.hpp"

#include "autocast.hpp"
#include "op_util.hpp"
#include "../backend/reduce.hpp"
#include "rumus/ops/compare.hpp"
#include "rumus/ops/creation.hpp"
#include "rumus/ops/elementwise.hpp"

namespace rumus {

using autograd::SavedTensor;
using detail::arg;

namespace {

Shape drop_dims(const Shape& keep_shape, const std::vector<std::int64_t>& dims) {
  Shape out;
  std::size_t j = 0;
  for (std::size_t d = 0; d < keep_shape.size(); ++d) {
    if (j < dims.size() && dims[j] == std::int64_t(d)) { ++j; continue; }
    out.push_back(keep_shape[d]);
  }
  return out;
}

// Runs the reduction kernel; returns the keepdim-shaped result.
Tensor reduce_keep(ReduceOp op, const Tensor& x, const Shape& keep_shape, DType out_dtype) {
  Tensor out = detail::alloc(keep_shape, out_dtype, x.device());
  if (out.numel() > 0) detail::kernel<ReduceKernel>(name_of(op), x)(op, arg(out), arg(x));
  return out;
}

Tensor finish(const Tensor& keep, const Shape& shape, bool keepdim, const std::vector<std::int64_t>& dims) {
  if (keepdim) return keep;
  return Tensor(keep.storage_ptr(), Layout::contiguous(drop_dims(shape, dims)), keep.dtype());
}

// Gradient of max/min: split evenly among the elements equal to the extremum.
std::vector<Tensor> extremum_grad(const Tensor& g, const Tensor& x, const Tensor& keep_val, const Shape& keep_shape,
                                  const std::vector<std::int64_t>& dims) {
  Tensor mask = eq(x, keep_val).to(x.dtype());
  Tensor count = sum(mask, dims, true);
  return {mul(mask, div(g.reshape(keep_shape), count))};
}

Tensor extremum(ReduceOp op, const char* name, const Tensor& x, std::vector<std::int64_t> dims, bool keepdim) {
  detail::check_defined(name, x);
  if (x.numel() == 0) throw ShapeError(std::string(name) + ": cannot reduce an empty tensor");
  Shape keep_shape = detail::reduced_shape(x.shape(), dims, name);
  Tensor keep = reduce_keep(op, x, keep_shape, x.dtype());
  Tensor out = finish(keep, keep_shape, keepdim, dims);
  if (autograd::needs_grad({&x}))
    autograd::record(name, {x}, out,
                     [sx = SavedTensor(x), sk = SavedTensor(keep.detach()), keep_shape, dims](const Tensor& g) {
                       return extremum_grad(g, sx.get(), sk.get(), keep_shape, dims);
                     },
                     {}, autograd::Backward::differentiable);
  return out;
}

}  // namespace

Tensor sum(const Tensor& x_in, const std::vector<std::int64_t>& dims_in, bool keepdim) {
  const auto cast = detail::autocast("sum", x_in);
  const Tensor& x = cast[0];
  detail::check_defined("sum", x);
  auto dims = dims_in;
  Shape keep_shape = detail::reduced_shape(x.shape(), dims, "sum");
  // Integer (and u8) tensors sum into i64, as in PyTorch: the input is widened
  // first, so nothing wraps. The reduce kernels of other devices compute in f32,
  // exact only below 2^24, so an integer sum runs on the host and its result is
  // copied back: exact on every device, at the cost of a round trip.
  DType out_dtype = is_floating(x.dtype()) ? x.dtype() : DType::i64;
  Tensor src = x;
  if (!is_floating(x.dtype())) src = x.detach().to(Device::cpu()).to(DType::i64);
  Tensor keep = x.numel() == 0 ? zeros(keep_shape, {.dtype = out_dtype, .device = x.device()})
                               : reduce_keep(ReduceOp::sum, src, keep_shape, out_dtype).to(x.device());
  Tensor out = finish(keep, keep_shape, keepdim, dims);
  if (autograd::needs_grad({&x})) {
    Shape in_shape = x.shape();
    autograd::record("sum", {x}, out, [in_shape, keep_shape](const Tensor& g) {
      return std::vector<Tensor>{g.reshape(keep_shape).expand(in_shape)};
    }, {}, autograd::Backward::differentiable);
  }
  return out;
}

Tensor mean(const Tensor& x_in, const std::vector<std::int64_t>& dims_in, bool keepdim) {
  const auto cast = detail::autocast("mean", x_in);
  const Tensor& x = cast[0];
  detail::check_floating("mean", x);
  auto dims = dims_in;
  Shape keep_shape = detail::reduced_shape(x.shape(), dims, "mean");
  std::int64_t count = x.numel() / std::max<std::int64_t>(numel_of(keep_shape), 1);
  Tensor keep = reduce_keep(ReduceOp::mean, x, keep_shape, x.dtype());
  Tensor out = finish(keep, keep_shape, keepdim, dims);
  if (autograd::needs_grad({&x})) {
    Shape in_shape = x.shape();
    autograd::record("mean", {x}, out, [in_shape, keep_shape, count](const Tensor& g) {
      return std::vector<Tensor>{mul(g, 1.0 / double(count)).reshape(keep_shape).expand(in_shape)};
    }, {}, autograd::Backward::differentiable);
  }
  return out;
}

Tensor max(const Tensor& x) { return extremum(ReduceOp::max, "max", x, {}, false); }
Tensor min(const Tensor& x) { return extremum(ReduceOp::min, "min", x, {}, false); }
namespace {
// Values and indices along one dim, as torch.max(x, dim). Unlike the full
// reduction (which splits among ties), the gradient goes to the one element
// the index names, as in PyTorch: a one-hot mask built on x's device.
std::tuple<Tensor, Tensor> extremum_dim(ReduceOp op, ReduceOp arg_op, const char* name, const Tensor& x,
                                        std::int64_t dim, bool keepdim) {
  detail::check_defined(name, x);
  std::vector<std::int64_t> dims{dim};
  Shape keep_shape = detail::reduced_shape(x.shape(), dims, name);
  if (x.dim() > 0 && x.shape()[dims[0]] == 0)
    throw ShapeError(fmt::format("{}: cannot reduce over dim {} of size 0 (input shape {})", name, dim,
                                 shape_str(x.shape())));
  if (x.dim() == 0) return {x.clone(), zeros({}, {.dtype = DType::i64, .device = x.device()})};
  Tensor keep = reduce_keep(op, x, keep_shape, x.dtype());
  Tensor keep_index = reduce_keep(arg_op, x, keep_shape, DType::i64);
  Tensor values = finish(keep, keep_shape, keepdim, dims);
  if (autograd::needs_grad({&x}))
    autograd::record(name, {x}, values,
                     [si = SavedTensor(keep_index), in_shape = x.shape(), keep_shape, d = dims[0]](const Tensor& g) {
                       Shape along(in_shape.size(), 1);
                       along[std::size_t(d)] = in_shape[std::size_t(d)];
                       Tensor pos = arange(double(along[std::size_t(d)]), {.dtype = DType::i64, .device = g.device()});
                       Tensor one_hot = eq(pos.reshape(along), si.get()).to(g.dtype());
                       return std::vector<Tensor>{mul(one_hot, g.reshape(keep_shape))};
                     },
                     {}, autograd::Backward::differentiable);
  return {values, finish(keep_index, keep_shape, keepdim, dims)};
}
}  // namespace

std::tuple<Tensor, Tensor> max(const Tensor& x, std::int64_t dim, bool keepdim) {
  return extremum_dim(ReduceOp::max, ReduceOp::argmax, "max", x, dim, keepdim);
}
std::tuple<Tensor, Tensor> min(const Tensor& x, std::int64_t dim, bool keepdim) {
  return extremum_dim(ReduceOp::min, ReduceOp::argmin, "min", x, dim, keepdim);
}
Tensor amax(const Tensor& x, const std::vector<std::int64_t>& dims, bool keepdim) {
  return extremum(ReduceOp::max, "amax", x, dims, keepdim);
}
Tensor amin(const Tensor& x, const std::vector<std::int64_t>& dims, bool keepdim) {
  return extremum(ReduceOp::min, "amin", x, dims, keepdim);
}

namespace {
Tensor arg_extremum(ReduceOp op, const char* name, const Tensor& x, std::int64_t dim, bool keepdim) {
  detail::check_defined(name, x);
  if (x.dim() == 0) return zeros({}, {.dtype = DType::i64, .device = x.device()});
  std::vector<std::int64_t> dims{dim};
  Shape keep_shape = detail::reduced_shape(x.shape(), dims, name);
  if (x.shape()[dims[0]] == 0) throw ShapeError(std::string(name) + ": cannot reduce over an empty dim");
  Tensor keep = reduce_keep(op, x, keep_shape, DType::i64);
  return finish(keep, keep_shape, keepdim, dims);
}
}  // namespace

Tensor argmax(const Tensor& x, std::int64_t dim, bool keepdim) {
  return arg_extremum(ReduceOp::argmax, "argmax", x, dim, keepdim);
}
Tensor argmin(const Tensor& x, std::int64_t dim, bool keepdim) {
  return arg_extremum(ReduceOp::argmin, "argmin", x, dim, keepdim);
}
Tensor argmax(const Tensor& x) { return argmax(x.detach().reshape({-1}), 0, false); }

Tensor sum_to(const Tensor& grad, const Shape& shape) {
  if (grad.shape() == shape) return grad;
  const std::size_t lead = grad.shape().size() - shape.size();
  std::vector<std::int64_t> dims;
  for (std::size_t d = 0; d < grad.shape().size(); ++d)
    if (d < lead || (shape[d - lead] == 1 && grad.shape()[d] != 1)) dims.push_back(std::int64_t(d));
  Tensor s = dims.empty() ? grad : sum(grad, dims, true);
  return s.reshape(shape);
}

Tensor Tensor::sum() const { return rumus::sum(*this); }
Tensor Tensor::sum(const std::vector<std::int64_t>& dims, bool keepdim) const { return rumus::sum(*this, dims, keepdim); }
Tensor Tensor::mean() const { return rumus::mean(*this); }
Tensor Tensor::mean(const std::vector<std::int64_t>& dims, bool keepdim) const {
  return rumus::mean(*this, dims, keepdim);
}
Tensor Tensor::max() const { return rumus::max(*this); }
Tensor Tensor::min() const { return rumus::min(*this); }
std::tuple<Tensor, Tensor> Tensor::max(std::int64_t d, bool keepdim) const { return rumus::max(*this, d, keepdim); }
std::tuple<Tensor, Tensor> Tensor::min(std::int64_t d, bool keepdim) const { return rumus::min(*this, d, keepdim); }
Tensor Tensor::amax(const std::vector<std::int64_t>& dims, bool keepdim) const {
  return rumus::amax(*this, dims, keepdim);
}
Tensor Tensor::amin(const std::vector<std::int64_t>& dims, bool keepdim) const {
  return rumus::amin(*this, dims, keepdim);
}
Tensor Tensor::argmax() const { return rumus::argmax(*this); }
Tensor Tensor::argmax(std::int64_t d, bool keepdim) const { return rumus::argmax(*this, d, keepdim); }
Tensor Tensor::argmin(std::int64_t d, bool keepdim) const { return rumus::argmin(*this, d, keepdim); }

}  // namespace rumus
