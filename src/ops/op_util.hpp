#pragma once
// Helpers shared by the ops layer: argument checks, allocation, kernel arguments.
#include <fmt/format.h>

#include <optional>

#include "rumus/autograd/tape.hpp"
#include "../backend/backend.hpp"
#include "../backend/kernel_registry.hpp"
#include "rumus/core/capture.hpp"
#include "rumus/core/generator.hpp"
#include "rumus/core/tensor.hpp"

namespace rumus::detail {

// Every kernel argument passes here, so a capture learns what its commands use.
inline TensorArg arg(const Tensor& t) {
  note_captured_tensor(t);
  return {t.storage_ptr().get(), t.dtype(), &t.layout()};
}
inline TensorArg arg(const Tensor& t, const Layout& l) {
  note_captured_tensor(t);
  return {t.storage_ptr().get(), t.dtype(), &l};
}
// A registered kernel (src/backend/kernel_registry.hpp) on t's device, once
// the device registered it for t's dtype; otherwise the op's one DeviceError.
Backend& kernel_device(std::string_view op, const Tensor& t);
[[noreturn]] void no_kernel(std::string_view op, std::string_view kernel, const Tensor& t);
template <class K>
BoundKernel<K> kernel(std::string_view op, const Tensor& t) {
  Backend& be = kernel_device(op, t);
  if (!supports<K>(be, t.dtype())) no_kernel(op, K::name, t);
  return BoundKernel<K>(be, op, profiling());
}
// Whether t's device registered every kernel of Ks for t's dtype (a choice
// between a fused kernel and a composition).
template <class... Ks>
bool has_kernels(const Tensor& t) {
  Backend& be = backend(t.device());
  return (supports<Ks>(be, t.dtype()) && ...);
}

// Fills the fresh contiguous `out` with draws of `kind` from `gen` (random.comp's
// parameters a, b). Inside a capture the draw takes fresh numbers at each
// replay (the generator advances before each one, as an eager call would);
// `gen` must then outlive the capture.
void random_kernel(const char* op, RandomKind kind, const Tensor& out, double a, double b, Generator& gen);

// The range check of gathered indices (contiguous i64): on the CPU, throws
// ShapeError "{op}: {what} {i} is out of range for a dim of size {n}". Other
// devices' gather kernels check and raise the ShapeError at the host's next
// wait (docs/ARCHITECTURE.md, "Out-of-range indices").
// `ignored` (a loss's ignore_index) passes whatever n is.
void check_indices(const char* op, const char* what, const Tensor& index, std::int64_t n,
                   std::optional<std::int64_t> ignored = std::nullopt);

// A fresh contiguous tensor (no autograd metadata). Running out of memory is
// an OutOfMemoryError naming the op, the shape and the dtype: the op is `op`,
// or else the calling function's name (free on the hot path: a pointer;
// __builtin_FUNCTION rather than std::source_location, which clang 14 lacks).
Tensor alloc(const Shape& shape, DType dtype, Device device, const char* op = nullptr,
             const char* caller = __builtin_FUNCTION());

// `t`'s layout viewed with `shape` by broadcasting (stride 0 on new/size-1 dims).
Layout broadcast_layout(const Tensor& t, const Shape& shape);

void check_defined(const char* op, const Tensor& t);
void check_same_device(const char* op, const Tensor& a, const Tensor& b);
// A mask or condition: bool, or u8 read as bool (nonzero is true).
void check_mask(const char* op, const char* what, const Tensor& t);
void check_floating(const char* op, const Tensor& t);
// Result dtype of a binary op, as in PyTorch: floating beats integer, wider beats narrower.
DType promote(DType a, DType b);
// Result dtype of a binary op on tensors, as PyTorch's result_type: a 0-d
// tensor takes part only when its category (integer < floating) is above the
// dimensioned tensor's, so ones({3}) * scalar_tensor(2.0, f64) stays f32.
DType result_type(const Tensor& a, const Tensor& b);

// Keepdim shape of reducing `shape` over `dims` (empty = all); also returns normalised dims.
Shape reduced_shape(const Shape& shape, std::vector<std::int64_t>& dims, const char* op);

// out = op(a, b) with broadcasting; a and b must share a dtype. No autograd.
Tensor binary_kernel(BinaryOp op, const char* name, const Tensor& a, const Tensor& b, DType out_dtype,
                     double p0 = 0, double p1 = 0);
// c = a @ b (+ beta * c) for 2-D or 3-D (batched) operands of one dtype, any
// strides (copied only when GEMM cannot read them). c is contiguous. A bias
// ([n], with beta = 0) is added to every row by the backend's GEMM. No autograd.
void gemm_into(const Tensor& c, const Tensor& a, const Tensor& b, double beta, const Tensor& bias = Tensor(),
               bool relu = false);
Tensor gemm(const Tensor& a, const Tensor& b);

// out = op(x), same shape and dtype. No autograd.
// `name`: the op as the user called it (for errors); unset: the kernel's name.
Tensor unary_kernel(UnaryOp op, const Tensor& x, double p0 = 0, double p1 = 0, const char* name = nullptr);

}  // namespace rumus::detail
