// Fused scaled dot-product attention: validate, view q/k/v as [B*H, L, D],
// call the device's attention kernels, record one tape entry whose backward
// recomputes the scores from the saved inputs and row logsumexps.
#include "rumus/ops/attention.hpp"

#include <algorithm>
#include <array>
#include <cmath>

#include "autocast.hpp"
#include "op_util.hpp"
#include "rumus/ops/dropout.hpp"
#include "rumus/ops/elementwise.hpp"
#include "rumus/ops/linalg.hpp"
#include "rumus/ops/softmax.hpp"
#include "rumus/core/capture.hpp"

namespace rumus {

using detail::arg;

namespace {

constexpr const char* kOp = "scaled_dot_product_attention";
// The 16-bit kernels keep a head's rows on the matrix units and in shared memory.
constexpr std::int64_t kWidest16BitHead = 128;

std::string shape_str(const Shape& s) { return fmt::format("[{}]", fmt::join(s, ", ")); }

void check_operands(const Tensor& q, const Tensor& k, const Tensor& v) {
  for (const Tensor* t : {&q, &k, &v}) detail::check_defined(kOp, *t);
  detail::check_floating(kOp, q);
  if (k.dtype() != q.dtype() || v.dtype() != q.dtype())
    throw DTypeError(fmt::format("{}: expected query, key and value of one dtype, got {}, {} and {}", kOp,
                                 dtype_name(q.dtype()), dtype_name(k.dtype()), dtype_name(v.dtype())));
  detail::check_same_device(kOp, q, k);
  detail::check_same_device(kOp, q, v);
  const std::int64_t nd = q.dim();
  if (nd != 3 && nd != 4)
    throw ShapeError(fmt::format("{}: expected 3-D (N, L, D) or 4-D (B, H, L, D) query, got shape {}", kOp,
                                 shape_str(q.shape())));
  if (k.dim() != nd || v.dim() != nd)
    throw ShapeError(fmt::format("{}: expected key and value of the query's rank {}, got shapes {} and {}", kOp, nd,
                                 shape_str(k.shape()), shape_str(v.shape())));
  const Shape &qs = q.shape(), &ks = k.shape(), &vs = v.shape();
  bool ok = ks[nd - 1] == qs[nd - 1] && vs[nd - 2] == ks[nd - 2];
  for (std::int64_t i = 0; i < nd - 2; ++i) ok = ok && ks[i] == qs[i] && vs[i] == qs[i];
  if (!ok)
    throw ShapeError(fmt::format(
        "{}: expected query (..., Lq, D), key (..., Lk, D) and value (..., Lk, Dv) with equal leading dims, got {}, "
        "{} and {}",
        kOp, shape_str(qs), shape_str(ks), shape_str(vs)));
}

// The mask as the kernel reads it: a [B, H, Lq, Lk] view with stride 0 on broadcast dims.
Layout mask_layout(const Tensor& mask, const Tensor& q, const Shape& full) {
  detail::check_same_device(kOp, q, mask);
  if (mask.dtype() != DType::u8 && !is_floating(mask.dtype()))
    throw DTypeError(fmt::format("{}: expected a u8 (boolean) or floating attn_mask, got {}", kOp,
                                 dtype_name(mask.dtype())));
  bool ok = mask.dim() <= std::int64_t(full.size());
  for (std::int64_t i = 1; ok && i <= mask.dim(); ++i) {
    const std::int64_t m = mask.shape()[std::size_t(mask.dim() - i)], f = full[full.size() - std::size_t(i)];
    ok = m == 1 || m == f;
  }
  if (!ok)
    throw ShapeError(fmt::format("{}: attn_mask of shape {} does not broadcast to {}", kOp, shape_str(mask.shape()),
                                 shape_str(full)));
  Layout l = detail::broadcast_layout(mask, full);
  if (full.size() == 3) {  // (N, Lq, Lk): one head
    l.shape.insert(l.shape.begin() + 1, 1);
    l.strides.insert(l.strides.begin() + 1, 0);
  }
  return l;
}

}  // namespace

Tensor scaled_dot_product_attention(const Tensor& query_in, const Tensor& key_in, const Tensor& value_in,
                                    const Tensor& attn_mask_in, double dropout_p, bool is_causal,
                                    std::optional<double> scale, Generator* generator) {
  // Under autocast, heads wider than the 16-bit kernels take stay in f32.
  const bool wide = query_in.defined() && value_in.defined() && query_in.dim() > 0 && value_in.dim() > 0 &&
                    std::max(query_in.shape().back(), value_in.shape().back()) > kWidest16BitHead;
  const auto cast = wide ? std::array<Tensor, 4>{query_in, key_in, value_in, attn_mask_in}
                         : detail::autocast(kOp, query_in, key_in, value_in, attn_mask_in);
  const Tensor &query = cast[0], &key = cast[1], &value = cast[2], &attn_mask = cast[3];
  check_operands(query, key, value);
  if (!(dropout_p >= 0.0 && dropout_p <= 1.0))
    throw ValueError(fmt::format("{}: expected 0 <= dropout_p <= 1, got {}", kOp, dropout_p));
  if (attn_mask.defined() && is_causal)
    throw ValueError(fmt::format("{}: expected attn_mask or is_causal, not both", kOp));
  if (scale && !std::isfinite(*scale)) throw ValueError(fmt::format("{}: expected a finite scale, got {}", kOp, *scale));

  const std::int64_t nd = query.dim();
  const Shape& qs = query.shape();
  if (attn_mask.defined() && is_floating(attn_mask.dtype()) && autograd::needs_grad({&attn_mask})) {
    // The mask's gradient is the score gradient, which the fused kernels never form.
    Shape full(qs.begin(), qs.end() - 2);
    full.push_back(qs[std::size_t(nd - 2)]);
    full.push_back(key.shape()[std::size_t(nd - 2)]);
    (void)mask_layout(attn_mask, query, full);  // the fused path's checks and messages
    const double s = scale ? *scale : 1.0 / std::sqrt(double(std::max<std::int64_t>(qs.back(), 1)));
    Tensor weights = softmax(add(mul(matmul(query, key.transpose(-2, -1)), s), attn_mask), -1);
    if (dropout_p > 0.0) weights = dropout(weights, dropout_p, true, generator);
    return matmul(weights, value);
  }
  AttentionParams p;
  p.batch = qs[0];
  p.heads = nd == 4 ? qs[1] : 1;
  p.lq = qs[std::size_t(nd - 2)];
  p.lk = key.shape()[std::size_t(nd - 2)];
  p.d = qs[std::size_t(nd - 1)];
  p.dv = value.shape()[std::size_t(nd - 1)];
  p.scale = scale ? *scale : 1.0 / std::sqrt(double(std::max<std::int64_t>(p.d, 1)));
  p.causal = is_causal;
  p.dropout_p = dropout_p;

  Shape out_shape = qs;
  out_shape.back() = p.dv;
  const std::int64_t bh = p.batch * p.heads;
  Tensor q = query.detach().contiguous().reshape({bh, p.lq, p.d});
  Tensor k = key.detach().contiguous().reshape({bh, p.lk, p.d});
  Tensor v = value.detach().contiguous().reshape({bh, p.lk, p.dv});
  Tensor mask = attn_mask.defined() ? attn_mask.detach() : Tensor();
  Layout ml;
  if (mask.defined()) {
    Shape full(qs.begin(), qs.end() - 2);
    full.push_back(p.lq);
    full.push_back(p.lk);
    ml = mask_layout(mask, query, full);
  }

  if (dropout_p > 0.0) {
    // Its seed and offset would be recorded: every replay would drop the same weights.
    check_not_capturing(kOp, "attention dropout (a random draw)");
    Generator& g = generator ? *generator : default_generator();
    p.seed = g.seed();
    p.offset = g.advance(std::uint64_t(bh * p.lq * p.lk));
  }

  Tensor out = detail::alloc({bh, p.lq, p.dv}, query.dtype(), query.device());
  // Row logsumexps stay f32 for 16-bit inputs: the backward's exp(s - lse) needs their precision.
  const bool half = query.dtype() == DType::f16 || query.dtype() == DType::bf16;
  Tensor lse = detail::alloc({bh, p.lq}, half ? DType::f32 : query.dtype(), query.device());
  const TensorArg mask_arg = mask.defined() ? arg(mask, ml) : TensorArg{nullptr, query.dtype(), &ml};
  if (out.numel() > 0) {
    if (p.lk == 0)
      detail::kernels(kOp, Kernel::fill, out).fill(arg(out), 0.0);  // no keys: every row is fully masked
    else
      detail::kernels(kOp, {Kernel::attention_forward, Kernel::attention_backward}, query)
          .attention_forward(p, arg(out), arg(lse), arg(q), arg(k), arg(v), mask_arg);
  }
  Tensor result = out.reshape(out_shape);
  if (autograd::needs_grad({&query, &key, &value})) {
    result = result.detach();
    autograd::record(kOp, {query, key, value}, result,
                     [p, qshape = qs, kshape = key.shape(), vshape = value.shape(), mask, ml,
                      sq = autograd::SavedTensor(q), sk = autograd::SavedTensor(k), sv = autograd::SavedTensor(v),
                      so = autograd::SavedTensor(out), sl = autograd::SavedTensor(lse)](const Tensor& g) {
                       const Tensor &q = sq.get(), &k = sk.get(), &v = sv.get();
                       Tensor go = g.contiguous().reshape({p.batch * p.heads, p.lq, p.dv});
                       Tensor gq = detail::alloc(q.shape(), q.dtype(), q.device());
                       Tensor gk = detail::alloc(k.shape(), k.dtype(), k.device());
                       Tensor gv = detail::alloc(v.shape(), v.dtype(), v.device());
                       const TensorArg margs =
                           mask.defined() ? arg(mask, ml) : TensorArg{nullptr, q.dtype(), &ml};
                       if (q.numel() > 0 || k.numel() > 0 || v.numel() > 0) {
                         if (go.numel() == 0 || p.lk == 0) {
                           Backend& be = detail::kernels(kOp, Kernel::fill, q);
                           for (const Tensor* t : {&gq, &gk, &gv})
                             if (t->numel() > 0) be.fill(arg(*t), 0.0);
                         } else {
                           detail::kernels(kOp, Kernel::attention_backward, q)
                               .attention_backward(p, arg(gq), arg(gk), arg(gv), arg(go), arg(q), arg(k), arg(v),
                                                   arg(so.get()), arg(sl.get()), margs);
                         }
                       }
                       return std::vector<Tensor>{gq.reshape(qshape), gk.reshape(kshape), gv.reshape(vshape)};
                     });
  }
  return result;
}

}  // namespace rumus
