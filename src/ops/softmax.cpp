// softmax/log_softmax along any dim: the dim is moved last, one row kernel runs, the result is viewed back.
#include "rumus/ops/softmax.hpp"

#include "autocast.hpp"
#include "op_util.hpp"
#include "../backend/softmax.hpp"
#include "rumus/ops/elementwise.hpp"
#include "rumus/ops/reduction.hpp"

namespace rumus {

using detail::arg;

namespace {

Tensor softmax_impl(const char* op, const Tensor& x, std::int64_t dim, bool log) {
  detail::check_floating(op, x);
  const std::int64_t nd = std::max<std::int64_t>(x.dim(), 1);
  const std::int64_t d = wrap_dim(dim, x.dim(), op);
  // Last-dim-contiguous working copy; for a 0-d input the "row" is one element.
  Tensor xt = (x.dim() == 0 ? x.detach().reshape({1}) : x.detach().transpose(d, nd - 1)).contiguous();
  Tensor yt = detail::alloc(xt.shape(), x.dtype(), x.device());
  if (yt.numel() > 0) detail::kernel<SoftmaxForwardKernel>(op, x)(arg(yt), arg(xt), log);
  Tensor out = x.dim() == 0 ? yt.reshape({}) : yt.transpose(d, nd - 1);
  if (autograd::needs_grad({&x})) {
    out = out.detach();
    autograd::record(op, {x}, out, [op, d, nd, log, scalar = x.dim() == 0, sy = autograd::SavedTensor(yt),
                                    so = autograd::SavedTensor(out)](const Tensor& g) {
      if (grad_enabled()) {  // under create_graph: the formula in ops, on the recorded output
        const Tensor& y = so.get();
        const std::vector<std::int64_t> along{scalar ? 0 : d};
        if (scalar) return std::vector<Tensor>{mul(g, 0.0)};  // a softmax of one element is constant
        if (log) return std::vector<Tensor>{sub(g, mul(exp(y), sum(g, along, true)))};
        return std::vector<Tensor>{mul(y, sub(g, sum(mul(g, y), along, true)))};
      }
      const Tensor& y = sy.get();
      Tensor gt = (scalar ? g.reshape({1}) : g.transpose(d, nd - 1)).contiguous();
      Tensor gi = detail::alloc(y.shape(), g.dtype(), g.device());
      if (gi.numel() > 0) detail::kernel<SoftmaxBackwardKernel>(op, g)(arg(gi), arg(gt), arg(y), log);
      return std::vector<Tensor>{scalar ? gi.reshape({}) : gi.transpose(d, nd - 1)};
    }, {}, autograd::Backward::differentiable);
  }
  return out;
}

}  // namespace

Tensor softmax(const Tensor& x, std::int64_t dim) {
  return softmax_impl("softmax", detail::autocast("softmax", x)[0], dim, false);
}
Tensor log_softmax(const Tensor& x, std::int64_t dim) {
  return softmax_impl("log_softmax", detail::autocast("log_softmax", x)[0], dim, true);
}
Tensor softmin(const Tensor& x, std::int64_t dim) {
  detail::check_floating("softmin", x);
  return softmax(neg(x), dim);
}

Tensor Tensor::softmax(std::int64_t dim) const { return rumus::softmax(*this, dim); }
Tensor Tensor::log_softmax(std::int64_t dim) const { return rumus::log_softmax(*this, dim); }

}  // namespace rumus
