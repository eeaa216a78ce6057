#include "rumus/ops/compare.hpp"

#include "op_util.hpp"
#include "rumus/ops/creation.hpp"
#include "rumus/ops/reduction.hpp"

namespace rumus {

namespace {
Tensor compare(BinaryOp op, const char* name, const Tensor& a, const Tensor& b) {
  detail::check_same_device(name, a, b);
  DType dt = detail::promote(a.dtype(), b.dtype());
  Tensor ca = a.dtype() == dt ? a.detach() : a.detach().to(dt);
  Tensor cb = b.dtype() == dt ? b.detach() : b.detach().to(dt);
  return detail::binary_kernel(op, name, ca, cb, DType::u8);
}
Tensor scalar_like(const Tensor& a, double v) { return full({}, v, {.dtype = a.dtype(), .device = a.device()}); }
}  // namespace

Tensor eq(const Tensor& a, const Tensor& b) { return compare(BinaryOp::eq, "eq", a, b); }
Tensor ne(const Tensor& a, const Tensor& b) { return compare(BinaryOp::ne, "ne", a, b); }
Tensor lt(const Tensor& a, const Tensor& b) { return compare(BinaryOp::lt, "lt", a, b); }
Tensor le(const Tensor& a, const Tensor& b) { return compare(BinaryOp::le, "le", a, b); }
Tensor gt(const Tensor& a, const Tensor& b) { return compare(BinaryOp::gt, "gt", a, b); }
Tensor ge(const Tensor& a, const Tensor& b) { return compare(BinaryOp::ge, "ge", a, b); }
Tensor eq(const Tensor& a, double b) { return eq(a, scalar_like(a, b)); }
Tensor gt(const Tensor& a, double b) { return gt(a, scalar_like(a, b)); }
Tensor lt(const Tensor& a, double b) { return lt(a, scalar_like(a, b)); }

Tensor where(const Tensor& cond, const Tensor& a0, const Tensor& b0) {
  detail::check_same_device("where", cond, a0);
  detail::check_same_device("where", a0, b0);
  if (cond.dtype() != DType::u8)
    throw DTypeError(fmt::format("where: expected a u8 condition (as comparisons return), got {}",
                                 dtype_name(cond.dtype())));
  DType dt = detail::promote(a0.dtype(), b0.dtype());
  Tensor a = a0.dtype() == dt ? a0 : a0.to(dt), b = b0.dtype() == dt ? b0 : b0.to(dt);
  Shape shape = broadcast_shapes(broadcast_shapes(cond.shape(), a.shape(), "where"), b.shape(), "where");
  Tensor out = detail::alloc(shape, dt, a.device());
  if (out.numel() > 0) {
    Layout lc = detail::broadcast_layout(cond, shape), la = detail::broadcast_layout(a, shape),
           lb = detail::broadcast_layout(b, shape);
    detail::kernels("where", Kernel::where, a).where(detail::arg(out), detail::arg(cond, lc), detail::arg(a, la), detail::arg(b, lb));
  }
  if (autograd::needs_grad({&a, &b}))
    autograd::record("where", {a, b}, out,
                     [c = autograd::SavedTensor(cond), sa = a.shape(), sb = b.shape()](const Tensor& g) {
                       Tensor z = zeros({}, {.dtype = g.dtype(), .device = g.device()});
                       return std::vector<Tensor>{sum_to(where(c.get(), g, z), sa), sum_to(where(c.get(), z, g), sb)};
                     });
  return out;
}

}  // namespace rumus
