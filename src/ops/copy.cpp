// Copies: contiguous, clone, dtype casts and device transfers (all differentiable),
// and reads into host vectors.
#include <vector>

#include "op_util.hpp"
#include "../backend/pointwise.hpp"

namespace rumus {

using detail::arg;

Tensor Tensor::contiguous() const { return is_contiguous() ? *this : clone(); }

Tensor Tensor::clone() const {
  Tensor out = detail::alloc(shape(), dtype(), device());
  if (numel() > 0) detail::kernel<CopyKernel>("clone", *this)(arg(out), arg(*this));
  if (autograd::needs_grad({this}))
    autograd::record("clone", {*this}, out, [](const Tensor& g) { return std::vector<Tensor>{g}; }, {}, autograd::Backward::differentiable);
  return out;
}

Tensor Tensor::to(DType target) const {
  if (target == dtype()) return *this;
  Tensor out = detail::alloc(shape(), target, device());
  if (numel() > 0) detail::kernel<CopyKernel>("to", *this)(arg(out), arg(*this));
  if (is_floating(target) && autograd::needs_grad({this}))
    autograd::record("cast", {*this}, out, [src = dtype()](const Tensor& g) { return std::vector<Tensor>{g.to(src)}; },
                     {}, autograd::Backward::differentiable);
  return out;
}

Tensor Tensor::to(Device target) const {
  if (target == device()) return *this;
  Tensor src = contiguous();
  Tensor out = detail::alloc(shape(), dtype(), target);
  const std::size_t nbytes = std::size_t(numel()) * dtype_size(dtype());
  if (nbytes > 0) {
    const std::size_t src_off = std::size_t(src.offset()) * dtype_size(dtype());
    if (src.device().is_cpu()) {
      out.storage().backend().write(out.storage(), 0, static_cast<const char*>(src.storage().data()) + src_off, nbytes);
    } else if (target.is_cpu()) {
      src.storage().backend().read(src.storage(), src_off, out.storage().data(), nbytes);
    } else {  // between two accelerators: through host memory
      std::vector<char> host(nbytes);
      src.storage().backend().read(src.storage(), src_off, host.data(), nbytes);
      out.storage().backend().write(out.storage(), 0, host.data(), nbytes);
    }
  }
  if (autograd::needs_grad({this}))
    autograd::record("to_device", {*this}, out,
                     [src_device = device()](const Tensor& g) { return std::vector<Tensor>{g.to(src_device)}; }, {},
                     autograd::Backward::differentiable);
  return out;
}

// The values in row-major order, cast to T on the tensor's device first.
template <class T>
std::vector<T> Tensor::to_vector() const {
  Tensor c = detach().to(dtype_of<T>()).contiguous();
  std::vector<T> out(static_cast<std::size_t>(c.numel()));
  if (!out.empty())
    c.storage().backend().read(c.storage(), c.offset() * sizeof(T), out.data(), out.size() * sizeof(T));
  return out;
}
template std::vector<float> Tensor::to_vector<float>() const;
template std::vector<double> Tensor::to_vector<double>() const;
template std::vector<Half> Tensor::to_vector<Half>() const;
template std::vector<BFloat16> Tensor::to_vector<BFloat16>() const;
template std::vector<std::int32_t> Tensor::to_vector<std::int32_t>() const;
template std::vector<std::int64_t> Tensor::to_vector<std::int64_t>() const;
template std::vector<std::uint8_t> Tensor::to_vector<std::uint8_t>() const;
template std::vector<std::int8_t> Tensor::to_vector<std::int8_t>() const;
template std::vector<std::int16_t> Tensor::to_vector<std::int16_t>() const;

}  // namespace rumus
