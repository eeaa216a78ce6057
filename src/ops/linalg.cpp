// matmul/bmm: every case reduces to one strided, batched GEMM call.
#include "rumus/ops/linalg.hpp"

#include "autocast.hpp"
#include "op_util.hpp"
#include "../backend/pointwise.hpp"
#include "../backend/gemm.hpp"
#include "rumus/ops/reduction.hpp"

namespace rumus {

using autograd::SavedTensor;
using detail::arg;

namespace {

// How GEMM reads a [batch?, rows, cols] operand: directly, transposed, or after a copy.
struct Operand {
  Tensor t;
  bool trans = false;
  std::int64_t ld = 0, batch_stride = 0;
};

Operand gemm_operand(const Tensor& x) {
  const auto nd = x.dim();
  auto rows = x.shape()[nd - 2], cols = x.shape()[nd - 1];
  auto rs = x.strides()[nd - 2], cs = x.strides()[nd - 1];
  auto batch_stride = nd == 3 ? (x.shape()[0] == 1 ? 0 : x.strides()[0]) : 0;
  if ((cs == 1 || cols == 1) && rs >= std::max<std::int64_t>(cols, 1)) return {x, false, rs, batch_stride};
  if ((rs == 1 || rows == 1) && cs >= std::max<std::int64_t>(rows, 1)) return {x, true, cs, batch_stride};
  Tensor c = x.detach().contiguous();  // a kernel-internal copy, not a recorded op
  return {c, false, std::max<std::int64_t>(cols, 1), nd == 3 ? rows * cols : 0};
}

}  // namespace

namespace detail {

void gemm_into(const Tensor& c, const Tensor& a, const Tensor& b, double beta, const Tensor& bias, bool relu) {
  const bool batched = a.dim() == 3;
  const auto m = a.shape()[a.dim() - 2], k = a.shape()[a.dim() - 1], n = b.shape()[b.dim() - 1];
  if (c.numel() == 0) return;
  if (k == 0) {  // no product: C becomes the bias, zeros (beta = 0), or stays as it is
    if (bias.defined()) kernel<CopyKernel>("matmul", c)(arg(c), arg(bias, broadcast_layout(bias, c.shape())));
    else if (beta == 0) kernel<FillKernel>("matmul", c)(arg(c), 0.0);
    if (relu) kernel<UnaryKernel>("matmul", c)(UnaryOp::relu, arg(c), arg(c), 0, 0);
    return;
  }
  Operand oa = gemm_operand(a), ob = gemm_operand(b);
  GemmArgs g{arg(oa.t), arg(ob.t), arg(c)};
  g.batch = batched ? a.shape()[0] : 1;
  g.m = m;
  g.n = n;
  g.k = k;
  g.trans_a = oa.trans;
  g.trans_b = ob.trans;
  g.lda = oa.ld;
  g.ldb = ob.ld;
  g.ldc = n;
  g.stride_a = oa.batch_stride;
  g.stride_b = ob.batch_stride;
  g.stride_c = m * n;
  g.beta = beta;
  if (bias.defined()) g.bias = arg(bias);
  g.relu = relu;
  kernel<GemmKernel>("matmul", c)(g);
}

Tensor gemm(const Tensor& a, const Tensor& b) {
  const bool batched = a.dim() == 3;
  const auto m = a.shape()[a.dim() - 2], n = b.shape()[b.dim() - 1];
  Tensor c = batched ? alloc({a.shape()[0], m, n}, a.dtype(), a.device()) : alloc({m, n}, a.dtype(), a.device());
  gemm_into(c, a, b, 0.0);
  return c;
}

}  // namespace detail

namespace {

Tensor gemm_kernel(const Tensor& a, const Tensor& b) { return detail::gemm(a, b); }

void check_pair(const char* op, const Tensor& a, const Tensor& b) {
  detail::check_same_device(op, a, b);
  detail::check_floating(op, a);
  if (a.dtype() != b.dtype())
    throw DTypeError(fmt::format("{}: dtypes differ: {} and {}", op, dtype_name(a.dtype()), dtype_name(b.dtype())));
}

// 2-D x 2-D, recorded.
Tensor mm(const Tensor& a, const Tensor& b) {  // NOLINT(misc-no-recursion): its backward may call it
  Tensor out = gemm_kernel(a, b);
  if (autograd::needs_grad({&a, &b})) {
    bool ga = a.requires_grad(), gb = b.requires_grad();
    autograd::record("matmul", {a, b}, out,
                     [sa = SavedTensor(gb ? a : Tensor()), sb = SavedTensor(ga ? b : Tensor()), ga, gb](const Tensor& g) {
                       // Under create_graph the products are recorded (mm), to be differentiated again.
                       auto product = grad_enabled() ? mm : gemm_kernel;
                       return std::vector<Tensor>{ga ? product(g, sb.get().t()) : Tensor(),
                                                  gb ? product(sa.get().t(), g) : Tensor()};
                     },
                     {}, autograd::Backward::differentiable);
  }
  return out;
}

}  // namespace

Tensor bmm(const Tensor& a_in, const Tensor& b_in) {
  const auto cast = detail::autocast("bmm", a_in, b_in);
  const Tensor &a = cast[0], &b = cast[1];
  check_pair("bmm", a, b);
  if (a.dim() != 3 || b.dim() != 3 || a.shape()[0] != b.shape()[0] || a.shape()[2] != b.shape()[1])
    throw ShapeError(fmt::format("bmm: expected [B, M, K] x [B, K, N], got {} x {}", shape_str(a.shape()),
                                 shape_str(b.shape())));
  Tensor out = gemm_kernel(a, b);
  if (autograd::needs_grad({&a, &b}))
    autograd::record("bmm", {a, b}, out, [sa = SavedTensor(a), sb = SavedTensor(b)](const Tensor& g) {
      if (grad_enabled())  // under create_graph: recorded, to be differentiated again
        return std::vector<Tensor>{bmm(g, sb.get().transpose(1, 2)), bmm(sa.get().transpose(1, 2), g)};
      return std::vector<Tensor>{gemm_kernel(g, sb.get().transpose(1, 2)), gemm_kernel(sa.get().transpose(1, 2), g)};
    }, {}, autograd::Backward::differentiable);
  return out;
}

Tensor matmul(const Tensor& a_in, const Tensor& b_in) {
  const auto cast = detail::autocast("matmul", a_in, b_in);
  const Tensor &a = cast[0], &b = cast[1];
  check_pair("matmul", a, b);
  const auto da = a.dim(), db = b.dim();
  if (da == 0 || db == 0)
    throw ShapeError(fmt::format("matmul: expected tensors of at least 1 dim, got {} x {}", shape_str(a.shape()),
                                 shape_str(b.shape())));
  const auto ka = a.shape()[da - 1], kb = b.shape()[db == 1 ? 0 : db - 2];
  if (ka != kb)
    throw ShapeError(fmt::format("matmul: inner dimensions differ: {} x {}", shape_str(a.shape()), shape_str(b.shape())));

  if (da == 1 && db == 1) return mm(a.unsqueeze(0), b.unsqueeze(1)).reshape({});
  if (da == 1) return matmul(a.unsqueeze(0), b).squeeze(-2);
  if (db == 1) return matmul(a, b.unsqueeze(1)).squeeze(-1);
  if (da == 2 && db == 2) return mm(a, b);
  if (db == 2) {  // fold a's batch dims into its rows: one GEMM
    Shape out_shape(a.shape().begin(), a.shape().end() - 1);
    out_shape.push_back(b.shape()[1]);
    return mm(a.reshape({-1, ka}), b).reshape(out_shape);
  }
  // Broadcast batch dims, then one batched GEMM.
  Shape ba(a.shape().begin(), a.shape().end() - 2), bb(b.shape().begin(), b.shape().end() - 2);
  Shape batch = broadcast_shapes(ba, bb, "matmul");
  const auto m = a.shape()[da - 2], n = b.shape()[db - 1];
  Shape ea = batch, eb = batch;
  ea.insert(ea.end(), {m, ka});
  eb.insert(eb.end(), {kb, n});
  const auto nb = numel_of(batch);
  Tensor out = bmm(a.expand(ea).reshape({nb, m, ka}), b.expand(eb).reshape({nb, kb, n}));
  Shape out_shape = batch;
  out_shape.insert(out_shape.end(), {m, n});
  return out.reshape(out_shape);
}

Tensor Tensor::matmul(const Tensor& other) const { return rumus::matmul(*this, other); }

}  // namespace rumus
