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

// ---- printing ----
namespace {
void print_rec(std::string& out, const std::vector<double>& v, const Shape& shape, std::size_t d,
               std::int64_t base, bool is_float, int indent) {
  if (shape.empty()) {
    out += is_float ? fmt::format("{:.4f}", v[0]) : fmt::format("{}", static_cast<long long>(v[0]));
    return;
  }
  std::int64_t n = shape[d], stride = 1;
  for (std::size_t i = d + 1; i < shape.size(); ++i) stride *= shape[i];
  bool summarise = numel_of(shape) > 1000 && n > 6;
  out += '[';
  for (std::int64_t i = 0; i < n; ++i) {
    if (summarise && i == 3) {
      out += d + 1 == shape.size() ? "..., " : "...,\n" + std::string(indent + d + 1, ' ');
      i = n - 3;
    }
    if (d + 1 == shape.size())
      out += is_float ? fmt::format("{:.4f}", v[base + i]) : fmt::format("{}", static_cast<long long>(v[base + i]));
    else
      print_rec(out, v, shape, d + 1, base + i * stride, is_float, indent);
    if (i + 1 < n) out += d + 1 == shape.size() ? ", " : ",\n" + std::string(indent + d + 1, ' ');
  }
  out += ']';
}
}  // namespace

std::string to_string(const Tensor& t) {
  if (!t.defined()) return "tensor(undefined)";
  std::vector<double> values = t.to_vector<double>();
  std::string body;
  print_rec(body, values, t.shape(), 0, 0, is_floating(t.dtype()), 7);
  return fmt::format("tensor({}, shape={}, dtype={}, device={}{})", body, shape_str(t.shape()),
                     dtype_name(t.dtype()), t.device().str(), t.requires_grad() ? ", requires_grad" : "");
}

std::ostream& operator<<(std::ostream& os, const Tensor& t) { return os << to_string(t); }
std::ostream& operator<<(std::ostream& os, DType t) { return os << dtype_name(t); }

}  // namespace rumus
