#include "op_util.hpp"

#include <algorithm>

#include "rumus/core/profiler.hpp"
#include "rumus/core/capture.hpp"

namespace rumus::detail {

namespace {
// Kernels a capture could not replay faithfully (core/capture.hpp). CPU
// kernels run at once, like the closure's other host code: their results
// reach the device only through uploads, which the device refuses.
void check_capturable(std::string_view op, const Tensor& t) {
  const Device dev = capturing_device();
  if (t.device().is_cpu()) return;
  if (t.device() != dev)
    throw CaptureError(fmt::format("{}: a kernel on {} inside a capture on {}: it would not run at replay (keep "
                                   "the captured step on one device)",
                                   op, t.device().str(), dev.str()));
}
}  // namespace

Backend& kernel_device(std::string_view op, const Tensor& t) {
  if (is_capturing()) check_capturable(op, t);
  return backend(t.device());
}

void no_kernel(std::string_view op, std::string_view kernel, const Tensor& t) {
  throw DeviceError(fmt::format("{}: device {} has no {} kernel for {} tensors", op, t.device().str(), kernel,
                                dtype_name(t.dtype())));
}

void check_indices(const char* op, const char* what, const Tensor& index, std::int64_t n,
                   std::optional<std::int64_t> ignored) {
  const std::int64_t count = index.numel();
  if (count == 0) return;
  auto fail = [&](std::int64_t i) {
    throw ShapeError(fmt::format("{}: {} {} is out of range for a dim of size {}", op, what, i, n));
  };
  // Other devices check in their gather kernels and report at their next wait:
  // reading the indices back here would stall every training step.
  if (!index.device().is_cpu()) return;
  const auto* ix = static_cast<const std::int64_t*>(index.storage().data()) + index.offset();
  for (std::int64_t i = 0; i < count; ++i)
    if ((ix[i] < 0 || ix[i] >= n) && ix[i] != ignored) fail(ix[i]);
}

namespace {
// The calling function's name is the op ("matmul"); inside a lambda it is
// "operator()", which in the ops layer is a backward function.
std::string op_of(const char* caller) {
  const std::string_view f = caller ? caller : "";
  if (f.empty()) return "an op";
  if (f == "operator()") return "backward";
  return std::string(f);
}
}  // namespace

Tensor alloc(const Shape& shape, DType dtype, Device device, const char* op, const char* caller) {
  for (auto d : shape)
    if (d < 0) throw ShapeError(fmt::format("empty: negative dimension in shape {}", shape_str(shape)));
  // Checked: the product of the dims (each at least 1, which bounds the strides) and the byte count.
  std::int64_t extent = 1, bytes = 0;
  bool fits = true;
  for (auto d : shape) fits = fits && !__builtin_mul_overflow(extent, std::max<std::int64_t>(d, 1), &extent);
  fits = fits && !__builtin_mul_overflow(extent, std::int64_t(dtype_size(dtype)), &bytes);
  if (!fits)
    throw ShapeError(fmt::format("empty: shape {} of {} has more elements or bytes than an int64 can count",
                                 shape_str(shape), dtype_name(dtype)));
  bytes = numel_of(shape) * std::int64_t(dtype_size(dtype));
  std::shared_ptr<Storage> storage;
  try {
    storage = std::make_shared<Storage>(device, std::size_t(numel_of(shape)) * dtype_size(dtype));
  } catch (const OutOfMemoryError&) {
    throw OutOfMemoryError(fmt::format("{}: out of memory allocating a {} tensor of shape {} ({} bytes) on {}",
                                       op ? std::string(op) : op_of(caller), dtype_name(dtype), shape_str(shape),
                                       bytes, device.str()));
  } catch (const std::bad_alloc&) {
    throw OutOfMemoryError(fmt::format("{}: out of memory allocating a {} tensor of shape {} ({} bytes) on {}",
                                       op ? std::string(op) : op_of(caller), dtype_name(dtype), shape_str(shape),
                                       bytes, device.str()));
  }
  return Tensor(std::move(storage), Layout::contiguous(shape), dtype);
}

Layout broadcast_layout(const Tensor& t, const Shape& shape) {
  Layout l;
  l.shape = shape;
  l.strides.assign(shape.size(), 0);
  l.offset = t.offset();
  std::size_t lead = shape.size() - t.shape().size();
  for (std::size_t i = 0; i < t.shape().size(); ++i)
    l.strides[lead + i] = t.shape()[i] == 1 ? 0 : t.strides()[i];
  return l;
}

void check_defined(const char* op, const Tensor& t) {
  if (!t.defined()) throw Error(fmt::format("{}: expected a defined tensor, got an undefined one", op));
}

void check_same_device(const char* op, const Tensor& a, const Tensor& b) {
  check_defined(op, a);
  check_defined(op, b);
  if (a.device() != b.device())
    throw DeviceError(fmt::format("{}: tensors are on different devices: {} and {}", op, a.device().str(),
                                  b.device().str()));
}

void check_mask(const char* op, const char* what, const Tensor& t) {
  check_defined(op, t);
  if (t.dtype() != DType::boolean && t.dtype() != DType::u8)
    throw DTypeError(fmt::format("{}: expected a bool {} (as comparisons return; u8 is read as bool too), got {}", op,
                                 what, dtype_name(t.dtype())));
}

void check_floating(const char* op, const Tensor& t) {
  check_defined(op, t);
  if (!is_floating(t.dtype()))
    throw DTypeError(fmt::format("{}: expected a floating-point tensor, got {}", op, dtype_name(t.dtype())));
}

// PyTorch's promotion lattice: bool < the integers < the floats; u8 and i8
// meet at i16, f16 and bf16 at f32.
DType promote(DType a, DType b) {
  if (a == b) return a;
  auto rank = [](DType t) {
    switch (t) {
      case DType::boolean: return 0;
      case DType::u8: case DType::i8: return 1;
      case DType::i16: return 2;
      case DType::i32: return 3;
      case DType::i64: return 4;
      case DType::f16: case DType::bf16: return 5;
      case DType::f32: return 6;
      case DType::f64: return 7;
    }
    return 0;
  };
  if ((a == DType::f16 && b == DType::bf16) || (a == DType::bf16 && b == DType::f16)) return DType::f32;
  if ((a == DType::u8 && b == DType::i8) || (a == DType::i8 && b == DType::u8)) return DType::i16;
  return rank(a) >= rank(b) ? a : b;
}

// A zero-dim operand sets the result's dtype only where its category (bool,
// integer, floating) is above the other operand's.
DType result_type(const Tensor& a, const Tensor& b) {
  const bool a0 = a.dim() == 0, b0 = b.dim() == 0;
  if (a0 == b0) return promote(a.dtype(), b.dtype());
  const Tensor& shaped = a0 ? b : a;
  const Tensor& scalar = a0 ? a : b;
  auto category = [](DType t) { return is_floating(t) ? 2 : t == DType::boolean ? 0 : 1; };
  if (category(scalar.dtype()) > category(shaped.dtype())) return scalar.dtype();
  return shaped.dtype();
}

Shape reduced_shape(const Shape& shape, std::vector<std::int64_t>& dims, const char* op) {
  const auto nd = std::int64_t(shape.size());
  if (dims.empty())
    for (std::int64_t d = 0; d < nd; ++d) dims.push_back(d);
  for (auto& d : dims) d = wrap_dim(d, nd, op);
  std::sort(dims.begin(), dims.end());
  if (std::adjacent_find(dims.begin(), dims.end()) != dims.end())
    throw ShapeError(fmt::format("{}: dim listed twice in reduction over {}", op, shape_str(shape)));
  Shape out = shape;
  for (auto d : dims)
    if (d < nd) out[d] = 1;
  return out;
}

}  // namespace rumus::detail
