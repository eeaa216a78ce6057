// lstm_cell_gates: the LSTM-cell kernels (src/backend/lstm.hpp), one pass
// forward and one backward per time step in place of a dozen pointwise ops
// each way. h' and c' are the two halves of one recorded output [2, N, H], so
// one node takes both gradients. The backward under create_graph is the
// same formula in ops, recorded, so it differentiates again.
#include "rumus/ops/rnn_cell.hpp"

#include "../backend/lstm.hpp"
#include "op_util.hpp"
#include "rumus/ops/activation.hpp"
#include "rumus/ops/conv.hpp"  // linear
#include "rumus/ops/elementwise.hpp"
#include "rumus/ops/join.hpp"

namespace rumus {

using autograd::SavedTensor;
using detail::arg;

namespace {

// The step in ops: for dtypes and devices without the kernels, and as the
// backward's formula when that backward is itself differentiated.
std::tuple<Tensor, Tensor> composed_step(const Tensor& xp, const Tensor& hp, const Tensor& c) {
  const std::vector<Tensor> g = chunk(add(xp, hp), 4, 1);  // i, f, g, o
  Tensor c_next = add(mul(sigmoid(g[1]), c), mul(sigmoid(g[0]), tanh(g[2])));
  Tensor h_next = mul(sigmoid(g[3]), tanh(c_next));
  return {h_next, c_next};
}

// The backward's formula in ops, from the step's inputs and the gradients of
// h' and c': the gradient of the gates (the same for both projections) and of c.
std::vector<Tensor> composed_grads(const Tensor& xp, const Tensor& hp, const Tensor& c, const Tensor& dh,
                                   const Tensor& dc) {
  const std::vector<Tensor> g = chunk(add(xp, hp), 4, 1);
  const Tensor i = sigmoid(g[0]), f = sigmoid(g[1]), gg = tanh(g[2]), o = sigmoid(g[3]);
  const Tensor tc = tanh(add(mul(f, c), mul(i, gg)));
  // The cell state's gradient: through h' = o tanh(c'), and from c' directly.
  const Tensor dcs = add(mul(mul(dh, o), sub(1.0, square(tc))), dc);
  const Tensor d_gates = cat({mul(mul(dcs, gg), mul(i, sub(1.0, i))), mul(mul(dcs, c), mul(f, sub(1.0, f))),
                              mul(mul(dcs, i), sub(1.0, square(gg))), mul(mul(dh, tc), mul(o, sub(1.0, o)))},
                             1);
  return {d_gates, d_gates, mul(dcs, f)};
}

void check(const char* op, const Tensor& xp, const Tensor& hp, const Tensor& c) {
  for (const Tensor* t : {&xp, &hp, &c}) detail::check_defined(op, *t);
  detail::check_floating(op, xp);
  for (const Tensor* t : {&hp, &c}) {
    detail::check_same_device(op, xp, *t);
    if (t->dtype() != xp.dtype())
      throw DTypeError(fmt::format("{}: expected every operand in {} (input_gates' dtype), got {}", op,
                                   dtype_name(xp.dtype()), dtype_name(t->dtype())));
  }
  if (c.dim() != 2)
    throw ShapeError(fmt::format("{}: expected cx of 2 dims [batch, hidden], got {}", op, shape_str(c.shape())));
  const Shape gates{c.size(0), 4 * c.size(1)};
  if (xp.shape() != gates || hp.shape() != gates)
    throw ShapeError(fmt::format("{}: expected input_gates and hidden_gates of shape {} (cx {} has 4 gates of "
                                 "hidden {}), got {} and {}",
                                 op, shape_str(gates), shape_str(c.shape()), c.size(1), shape_str(xp.shape()),
                                 shape_str(hp.shape())));
}

}  // namespace

std::tuple<Tensor, Tensor> lstm_cell_gates(const Tensor& input_gates, const Tensor& hidden_gates, const Tensor& cx) {
  const char* op = "lstm_cell_gates";
  check(op, input_gates, hidden_gates, cx);
  if (!detail::has_kernels<LstmCellForwardKernel, LstmCellBackwardKernel>(input_gates))
    return composed_step(input_gates, hidden_gates, cx);
  const Tensor xp = input_gates.detach().contiguous(), hp = hidden_gates.detach().contiguous(),
               c = cx.detach().contiguous();
  const std::int64_t batch = c.size(0), hidden = c.size(1);
  Tensor hc = detail::alloc({2, batch, hidden}, c.dtype(), c.device(), op);
  Tensor act = detail::alloc({batch, 4 * hidden}, c.dtype(), c.device(), op);
  const Tensor h_next = hc.select(0, 0), c_next = hc.select(0, 1);
  if (c.numel() > 0)
    detail::kernel<LstmCellForwardKernel>(op, c)(arg(h_next), arg(c_next), arg(act), arg(xp), arg(hp), arg(c));
  if (autograd::needs_grad({&input_gates, &hidden_gates, &cx})) {
    autograd::record(
        op, {input_gates, hidden_gates, cx}, hc,
        [op, sxp = SavedTensor(input_gates), shp = SavedTensor(hidden_gates), sc = SavedTensor(cx), act,
         sc_next = SavedTensor(c_next)](const Tensor& grad) {
          if (grad_enabled())  // under create_graph: the formula in ops, recorded
            return composed_grads(sxp.get(), shp.get(), sc.get(), grad.select(0, 0), grad.select(0, 1));
          const Tensor g = grad.contiguous();
          const Tensor& c = sc.get();
          const Tensor c_in = c.contiguous();
          Tensor d_gates = detail::alloc(act.shape(), c.dtype(), c.device(), op);
          Tensor d_c = detail::alloc(c.shape(), c.dtype(), c.device(), op);
          const Tensor dh = g.select(0, 0), dc = g.select(0, 1);
          if (c.numel() > 0)
            detail::kernel<LstmCellBackwardKernel>(op, c)(arg(d_gates), arg(d_c), arg(dh), arg(dc), arg(act),
                                                          arg(c_in), arg(sc_next.get()));
          return std::vector<Tensor>{d_gates, d_gates, d_c};
        },
        {}, autograd::Backward::differentiable);
  }
  return {hc.select(0, 0), hc.select(0, 1)};
}

std::tuple<Tensor, Tensor> lstm_cell(const Tensor& input, const std::vector<Tensor>& hx, const Tensor& w_ih,
                                     const Tensor& w_hh, const Tensor& b_ih, const Tensor& b_hh) {
  if (hx.size() != 2)
    throw ValueError(fmt::format("lstm_cell: expected hx = {{h, c}}, two tensors, got {}", hx.size()));
  return lstm_cell_gates(linear(input, w_ih, b_ih), linear(hx[0], w_hh, b_hh), hx[1]);
}

}  // namespace rumus
