#include "rumus/core/tensor.hpp"

#include "rumus/core/capture.hpp"

#include <fmt/format.h>

#include <atomic>
#include <ostream>


namespace rumus {

GradId next_grad_id() {
  static std::atomic<GradId> counter{1};
  return counter.fetch_add(1, std::memory_order_relaxed);
}

Tensor::Tensor(std::shared_ptr<Storage> storage, Layout layout, DType dtype)
    : impl_(std::make_shared<TensorImpl>()) {
  impl_->storage = std::move(storage);
  impl_->layout = std::move(layout);
  impl_->dtype = dtype;
}

TensorImpl& Tensor::impl() const {
  if (!impl_) throw Error("Tensor: operation on an undefined tensor");
  return *impl_;
}

std::int64_t Tensor::size(std::int64_t d) const { return shape()[wrap_dim(d, dim(), "size")]; }

Tensor& Tensor::requires_grad_(bool on) {
  if (on && !is_floating(dtype()))
    throw DTypeError(fmt::format("requires_grad_: only floating-point tensors can require grad, got {}",
                                 dtype_name(dtype())));
  impl().requires_grad = on;
  return *this;
}

Tensor Tensor::detach() const {
  note_captured_tensor(*this);  // a captured kernel that reads the alias depends on this tensor's memory
  return Tensor(impl().storage, impl().layout, impl().dtype);
}

namespace {
template <class T>
double load_as_double(const void* p) {
  return static_cast<double>(static_cast<float>(*static_cast<const T*>(p)));
}
double decode(DType dt, const void* p) {
  switch (dt) {
    case DType::f32: return *static_cast<const float*>(p);
    case DType::f64: return *static_cast<const double*>(p);
    case DType::f16: return load_as_double<Half>(p);
    case DType::bf16: return load_as_double<BFloat16>(p);
    case DType::i32: return *static_cast<const std::int32_t*>(p);
    case DType::i64: return static_cast<double>(*static_cast<const std::int64_t*>(p));
    case DType::u8: return *static_cast<const std::uint8_t*>(p);
    case DType::boolean: return *static_cast<const std::uint8_t*>(p) != 0;
    case DType::i8: return *static_cast<const std::int8_t*>(p);
    case DType::i16: return *static_cast<const std::int16_t*>(p);
  }
  return 0;
}
}  // namespace

double Tensor::item() const {
  if (numel() != 1)
    throw ShapeError(fmt::format("item: expected a tensor with 1 element, got shape {}", shape_str(shape())));
  unsigned char buf[8];
  storage().backend().read(storage(), offset() * dtype_size(dtype()), buf, dtype_size(dtype()));
  return decode(dtype(), buf);
}

std::ostream& operator<<(std::ostream& os, DType t) { return os << dtype_name(t); }

}  // namespace rumus
