// Fused scaled dot-product attention: validate, view q/k/v as [B, H, L, D]
// where they lie (copying only layouts the kernels do not read), call the
// device's attention kernels, record one tape entry whose backward recomputes
// the scores from the saved inputs and row logsumexps. The output is laid
// out as [B, L, H, Dv], so merging its heads back is a view.
#include "rumus/ops/attention.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>

#include "autocast.hpp"
#include "op_util.hpp"
#include "../backend/pointwise.hpp"
#include "../backend/attention.hpp"
#include "rumus/ops/compare.hpp"
#include "rumus/ops/creation.hpp"
#include "rumus/ops/dropout.hpp"
#include "rumus/ops/elementwise.hpp"
#include "rumus/ops/join.hpp"
#include "rumus/ops/linalg.hpp"
#include "rumus/ops/reduction.hpp"
#include "rumus/ops/softmax.hpp"
#include "rumus/core/capture.hpp"

namespace rumus {

using detail::arg;

namespace {

constexpr const char* kOp = "scaled_dot_product_attention";
// The 16-bit kernels keep a head's rows on the matrix units and in shared memory.
constexpr std::int64_t kWidest16BitHead = 128;

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
Layout mask_layout(const char* op, const Tensor& mask, const Tensor& q, const Shape& full) {
  detail::check_same_device(op, q, mask);
  if (mask.dtype() != DType::boolean && mask.dtype() != DType::u8 && !is_floating(mask.dtype()))
    throw DTypeError(fmt::format("{}: expected a bool (or u8) or floating attn_mask, got {}", op,
                                 dtype_name(mask.dtype())));
  bool ok = mask.dim() <= std::int64_t(full.size());
  for (std::int64_t i = 1; ok && i <= mask.dim(); ++i) {
    const std::int64_t m = mask.shape()[std::size_t(mask.dim() - i)], f = full[full.size() - std::size_t(i)];
    ok = m == 1 || m == f;
  }
  if (!ok)
    throw ShapeError(fmt::format("{}: attn_mask of shape {} does not broadcast to {}", op, shape_str(mask.shape()),
                                 shape_str(full)));
  Layout l = detail::broadcast_layout(mask, full);
  if (full.size() == 3) {  // (N, Lq, Lk): one head
    l.shape.insert(l.shape.begin() + 1, 1);
    l.strides.insert(l.strides.begin() + 1, 0);
  }
  return l;
}

// [B, H, L, W] of a 3-D (N, L, W) or 4-D operand.
Tensor heads_of(const Tensor& t) { return t.dim() == 4 ? t : t.unsqueeze(1); }

// A new [B, H, L, W] operand stored as [B, L, H, W]: what the kernels write
// for the output, and what `transpose(1, 2).reshape({B, L, H * W})` views.
Tensor new_heads(std::int64_t b, std::int64_t h, std::int64_t len, std::int64_t w, const Tensor& like) {
  return detail::alloc({b, len, h, w}, like.dtype(), like.device()).transpose(1, 2);
}

// q, k and v as the kernels read them: one head_slots() layout for all three.
void share_layout(Tensor& q, Tensor& k, Tensor& v) {
  const std::int64_t slots = head_slots(q.layout());
  if (slots >= 0 && head_slots(k.layout()) == slots && head_slots(v.layout()) == slots) return;
  q = q.contiguous();
  k = k.contiguous();
  v = v.contiguous();
}

// `g` in the layout of `like` (grad_out must lie as out does).
Tensor laid_like(const char* op, const Tensor& g, const Tensor& like) {
  if (head_slots(g.layout()) == head_slots(like.layout())) return g;
  const Shape& n = like.shape();
  Tensor copy = new_heads(n[0], n[1], n[2], n[3], g);
  if (copy.numel() > 0) detail::kernel<CopyKernel>(op, g)(arg(copy), arg(g));
  return copy;
}

// What one fused call needs besides its operands.
struct Plan {
  const char* op;  // the op's name, for messages
  AttentionParams p;
  Tensor mask;
  Layout ml;
};

// The checks of dropout_p, attn_mask with is_causal, and scale.
void check_options(const char* op, const Tensor& attn_mask, double dropout_p, bool is_causal,
                   std::optional<double> scale) {
  if (!(dropout_p >= 0.0 && dropout_p <= 1.0))
    throw ValueError(fmt::format("{}: expected 0 <= dropout_p <= 1, got {}", op, dropout_p));
  if (attn_mask.defined() && is_causal)
    throw ValueError(fmt::format("{}: expected attn_mask or is_causal, not both", op));
  if (scale && !std::isfinite(*scale)) throw ValueError(fmt::format("{}: expected a finite scale, got {}", op, *scale));
}

// The kernels' parameters for [B, H, Lq, D] q and [B, H, Lk, Dv] v; draws the dropout stream.
Plan make_plan(const char* op, const Tensor& q, const Tensor& v, std::int64_t lk, std::int64_t user_rank,
               const Tensor& attn_mask, double dropout_p, bool is_causal, std::optional<double> scale,
               Generator* generator) {
  Plan plan;
  plan.op = op;
  AttentionParams& p = plan.p;
  const Shape& qs = q.shape();
  p.batch = qs[0];
  p.heads = qs[1];
  p.lq = qs[2];
  p.lk = lk;
  p.d = qs[3];
  p.dv = v.shape()[3];
  p.scale = scale ? *scale : 1.0 / std::sqrt(double(std::max<std::int64_t>(p.d, 1)));
  p.causal = is_causal;
  p.dropout_p = dropout_p;
  if (attn_mask.defined()) {
    plan.mask = attn_mask.detach();
    Shape full = user_rank == 4 ? Shape{p.batch, p.heads, p.lq, p.lk} : Shape{p.batch, p.lq, p.lk};
    plan.ml = mask_layout(op, plan.mask, q, full);
  }
  if (dropout_p > 0.0) {
    // Its seed and offset would be recorded: every replay would drop the same weights.
    check_not_capturing(op, "attention dropout (a random draw)");
    Generator& g = generator ? *generator : default_generator();
    p.seed = g.seed();
    p.offset = g.advance(std::uint64_t(p.batch * p.heads * p.lq * p.lk));
  }
  return plan;
}

TensorArg mask_arg(const Plan& plan, DType dtype) {
  return plan.mask.defined() ? arg(plan.mask, plan.ml) : TensorArg{nullptr, dtype, &plan.ml};
}

// out = attention(q, k, v); returns the row logsumexps.
Tensor run_forward(const Plan& plan, const Tensor& out, const Tensor& q, const Tensor& k, const Tensor& v) {
  const AttentionParams& p = plan.p;
  // Row logsumexps stay f32 for 16-bit inputs: the backward's exp(s - lse) needs their precision.
  const bool half = is_16bit_float(q.dtype());
  Tensor lse = detail::alloc({p.batch * p.heads, p.lq}, half ? DType::f32 : q.dtype(), q.device());
  if (out.numel() == 0) return lse;
  if (p.lk == 0)
    detail::kernel<FillKernel>(plan.op, out)(arg(out), 0.0);  // no keys: every row is fully masked
  else
    detail::kernel<AttentionForwardKernel>(plan.op, q)(p, arg(out), arg(lse), arg(q), arg(k), arg(v),
                                                       mask_arg(plan, q.dtype()));
  return lse;
}

// The gradients of q, k and v into gq, gk and gv (one head_slots() layout).
void run_backward(const Plan& plan, const Tensor& gq, const Tensor& gk, const Tensor& gv, const Tensor& go,
                  const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& lse) {
  const AttentionParams& p = plan.p;
  if (q.numel() == 0 && k.numel() == 0 && v.numel() == 0) return;
  if (go.numel() == 0 || p.lk == 0) {
    const auto fill = detail::kernel<FillKernel>(plan.op, q);
    for (const Tensor* t : {&gq, &gk, &gv})
      if (t->numel() > 0) fill(arg(*t), 0.0);
    return;
  }
  detail::kernel<AttentionBackwardKernel>(plan.op, q)(p, arg(gq), arg(gk), arg(gv), arg(laid_like(plan.op, go, out)),
                                                      arg(q), arg(k), arg(v), arg(out), arg(lse),
                                                      mask_arg(plan, q.dtype()));
}

// The kernels' dropout multipliers as a [B, H, Lq, Lk] tensor: weight
// (bh, i, j) is dropped where the bernoulli draw of probability dropout_p at
// element (bh * Lq + i) * Lk + j of the same Philox stream hits (both decide
// on one 24-bit integer against ceil(p * 2^24)).
Tensor dropout_multipliers(const AttentionParams& p, const Tensor& like) {
  Tensor dropped = detail::alloc({p.batch, p.heads, p.lq, p.lk}, like.dtype(), like.device());
  Generator stream;
  stream.set_state(p.seed, p.offset);
  detail::random_kernel(kOp, RandomKind::bernoulli, dropped, p.dropout_p, 1.0, stream);
  return mul(sub(1.0, dropped), p.dropout_p >= 1.0 ? 0.0 : 1.0 / (1.0 - p.dropout_p));
}

// The gradients of q, k and v ([B, H, L, W], saved with their graph) written
// with ops, for create_graph: the math path's formula with the kernels' own
// dropout mask, so they differentiate to any order. A query row with every
// key masked gives zero gradients, as the kernels do.
std::array<Tensor, 3> composed_gradients(const Plan& plan, const Tensor& q, const Tensor& k, const Tensor& v,
                                         const Tensor& go) {
  const AttentionParams& p = plan.p;
  if (p.lk == 0 || q.numel() == 0) return {zeros_like(q), zeros_like(k), zeros_like(v)};
  Tensor s = mul(matmul(q, k.transpose(-2, -1)), p.scale);
  Tensor keep;  // u8 [.., Lq, Lk] where the key is attended, for boolean and causal masks
  if (plan.mask.defined()) {
    const Tensor mask(plan.mask.storage_ptr(), plan.ml, plan.mask.dtype());
    if (is_floating(mask.dtype())) s = add(s, mask);
    else keep = ne(mask, 0.0);
  }
  if (p.causal) {
    const TensorOptions i64{.dtype = DType::i64, .device = q.device()};
    keep = ge(arange(double(p.lq), i64).view({p.lq, 1}), arange(double(p.lk), i64).view({1, p.lk}));
  }
  Tensor w;
  if (keep.defined()) {
    const Tensor row_ok = gt(sum(keep.to(q.dtype()), {-1}, true), 0.0);
    s = where(keep, s, -std::numeric_limits<double>::infinity());
    s = where(row_ok, s, 0.0);  // a fully masked row: finite scores, its weights zeroed below
    w = mul(softmax(s, -1), row_ok.to(q.dtype()));
  } else {
    w = softmax(s, -1);
  }
  const Tensor z = p.dropout_p > 0.0 ? dropout_multipliers(p, q) : Tensor();
  Tensor dv = matmul((z.defined() ? mul(w, z) : w).transpose(-2, -1), go);
  Tensor dw = matmul(go, v.transpose(-2, -1));
  if (z.defined()) dw = mul(dw, z);
  Tensor ds = mul(w, sub(dw, sum(mul(dw, w), {-1}, true)));
  return {mul(matmul(ds, k), p.scale), mul(matmul(ds.transpose(-2, -1), q), p.scale), dv};
}

// Under autocast, heads wider than the 16-bit kernels take stay in f32.
bool wide_heads(const Tensor& q, const Tensor& v) {
  return q.defined() && v.defined() && q.dim() > 0 && v.dim() > 0 &&
         std::max(q.shape().back(), v.shape().back()) > kWidest16BitHead;
}

}  // namespace

Tensor scaled_dot_product_attention(const Tensor& query_in, const Tensor& key_in, const Tensor& value_in,
                                    const Tensor& attn_mask_in, double dropout_p, bool is_causal,
                                    std::optional<double> scale, Generator* generator) {
  const auto cast = wide_heads(query_in, value_in) ? std::array<Tensor, 4>{query_in, key_in, value_in, attn_mask_in}
                                                   : detail::autocast(kOp, query_in, key_in, value_in, attn_mask_in);
  const Tensor &query = cast[0], &key = cast[1], &value = cast[2], &attn_mask = cast[3];
  check_operands(query, key, value);
  check_options(kOp, attn_mask, dropout_p, is_causal, scale);
  const std::int64_t nd = query.dim();
  const Shape& qs = query.shape();
  if (attn_mask.defined() && is_floating(attn_mask.dtype()) && autograd::needs_grad({&attn_mask})) {
    // The mask's gradient is the score gradient, which the fused kernels never form.
    Shape full(qs.begin(), qs.end() - 2);
    full.push_back(qs[std::size_t(nd - 2)]);
    full.push_back(key.shape()[std::size_t(nd - 2)]);
    (void)mask_layout(kOp, attn_mask, query, full);  // the fused path's checks and messages
    const double s = scale ? *scale : 1.0 / std::sqrt(double(std::max<std::int64_t>(qs.back(), 1)));
    Tensor weights = softmax(add(mul(matmul(query, key.transpose(-2, -1)), s), attn_mask), -1);
    if (dropout_p > 0.0) weights = dropout(weights, dropout_p, true, generator);
    return matmul(weights, value);
  }
  Tensor q = heads_of(query.detach()), k = heads_of(key.detach()), v = heads_of(value.detach());
  share_layout(q, k, v);
  const Plan plan = make_plan(kOp, q, v, k.shape()[2], nd, attn_mask, dropout_p, is_causal, scale, generator);
  const AttentionParams& p = plan.p;
  const Tensor out = new_heads(p.batch, p.heads, p.lq, p.dv, q);
  const Tensor lse = run_forward(plan, out, q, k, v);

  Tensor result = (nd == 4 ? out : out.select(1, 0)).detach();
  if (autograd::needs_grad({&query, &key, &value})) {
    // Under create_graph the saved query, key and value with their graph
    // (the same storage as q, k and v).
    autograd::record(kOp, {query, key, value}, result,
                     [plan, nd, sq = autograd::SavedTensor(q), sk = autograd::SavedTensor(k),
                      sv = autograd::SavedTensor(v), so = autograd::SavedTensor(out),
                      sl = autograd::SavedTensor(lse), gq_in = autograd::SavedTensor(query),
                      gk_in = autograd::SavedTensor(key),
                      gv_in = autograd::SavedTensor(value)](const Tensor& g) {
                       if (grad_enabled()) {
                         auto [dq, dk, dv] = composed_gradients(plan, heads_of(gq_in.get()), heads_of(gk_in.get()),
                                                                heads_of(gv_in.get()), heads_of(g));
                         if (nd == 3) return std::vector<Tensor>{dq.select(1, 0), dk.select(1, 0), dv.select(1, 0)};
                         return std::vector<Tensor>{dq, dk, dv};
                       }
                       const Tensor &q = sq.get(), &k = sk.get(), &v = sv.get();
                       // The gradients lie as their inputs do where the kernels read that layout in place.
                       auto grad_like = [&](const Tensor& t) {
                         const Shape& n = t.shape();
                         return head_slots(t.layout()) == 0 ? detail::alloc(n, t.dtype(), t.device())
                                                            : new_heads(n[0], n[1], n[2], n[3], t);
                       };
                       Tensor gq = grad_like(q), gk = grad_like(k), gv = grad_like(v);
                       run_backward(plan, gq, gk, gv, heads_of(g), q, k, v, so.get(), sl.get());
                       if (nd == 3) return std::vector<Tensor>{gq.select(1, 0), gk.select(1, 0), gv.select(1, 0)};
                       return std::vector<Tensor>{gq, gk, gv};
                     },
                     {}, autograd::Backward::differentiable);
  }
  return result;
}

Tensor packed_self_attention(const Tensor& qkv_in, std::int64_t num_heads, const Tensor& attn_mask_in,
                             double dropout_p, bool is_causal, std::optional<double> scale, Generator* generator) {
  constexpr const char* kPacked = "packed_self_attention";
  detail::check_defined(kPacked, qkv_in);
  if (qkv_in.dim() != 3 || num_heads < 1 || qkv_in.shape()[2] % (3 * num_heads) != 0)
    throw ShapeError(fmt::format("{}: expected (N, L, 3 * E) with E divisible by num_heads {}, got shape {}",
                                 kPacked, num_heads, shape_str(qkv_in.shape())));
  const std::int64_t n = qkv_in.shape()[0], l = qkv_in.shape()[1], e = qkv_in.shape()[2] / 3;
  const std::int64_t head_dim = e / num_heads;
  // q, k and v as [N, H, L, D] views of the projection: heads side by side, 3H head widths a row.
  auto split = [n, l, num_heads, head_dim](const Tensor& t) {
    const Tensor heads = t.reshape({n, l, 3, num_heads, head_dim});
    return std::array<Tensor, 3>{heads.select(2, 0).transpose(1, 2), heads.select(2, 1).transpose(1, 2),
                                 heads.select(2, 2).transpose(1, 2)};
  };
  const bool mask_grad =
      attn_mask_in.defined() && is_floating(attn_mask_in.dtype()) && autograd::needs_grad({&attn_mask_in});
  if (mask_grad) {  // the mask's gradient: the unfused composition, through views
    const auto [q, k, v] = split(qkv_in);
    return scaled_dot_product_attention(q, k, v, attn_mask_in, dropout_p, is_causal, scale, generator)
        .transpose(1, 2)
        .reshape({n, l, e});
  }
  // Under autocast, attention's own policy (kOp's); wide heads stay f32 as there.
  const auto cast = head_dim > kWidest16BitHead ? std::array<Tensor, 2>{qkv_in, attn_mask_in}
                                                : detail::autocast(kOp, qkv_in, attn_mask_in);
  const Tensor &qkv = cast[0], &attn_mask = cast[1];
  detail::check_floating(kPacked, qkv);
  check_options(kPacked, attn_mask, dropout_p, is_causal, scale);
  auto [q, k, v] = split(qkv.detach());
  share_layout(q, k, v);
  const Plan plan = make_plan(kPacked, q, v, l, 4, attn_mask, dropout_p, is_causal, scale, generator);
  const Tensor out = new_heads(n, num_heads, l, head_dim, q);
  const Tensor lse = run_forward(plan, out, q, k, v);
  Tensor result = out.transpose(1, 2).reshape({n, l, e}).detach();
  if (autograd::needs_grad({&qkv})) {
    autograd::record(kPacked, {qkv}, result,
                     [plan, split, sq = autograd::SavedTensor(q), sk = autograd::SavedTensor(k),
                      sv = autograd::SavedTensor(v), so = autograd::SavedTensor(out), sl = autograd::SavedTensor(lse),
                      sqkv = autograd::SavedTensor(qkv)](const Tensor& g) {
                       const Tensor& q = sq.get();
                       const AttentionParams& p = plan.p;
                       if (grad_enabled()) {  // create_graph: the formula with ops on qkv's heads
                         const auto [q, k, v] = split(sqkv.get());
                         const Tensor go = g.reshape({p.batch, p.lq, p.heads, p.dv}).transpose(1, 2);
                         const auto grads = composed_gradients(plan, q, k, v, go);
                         std::vector<Tensor> parts;
                         for (const Tensor& t : grads) parts.push_back(t.transpose(1, 2).reshape({p.batch, p.lq, -1}));
                         return std::vector<Tensor>{cat(parts, 2)};
                       }
                       // One gradient for the projection: the kernels write its three parts in place.
                       Tensor grad = detail::alloc({p.batch, p.lq, 3 * p.heads * p.d}, q.dtype(), q.device());
                       const auto [gq, gk, gv] = split(grad);
                       const Tensor go = g.reshape({p.batch, p.lq, p.heads, p.dv}).transpose(1, 2);
                       run_backward(plan, gq, gk, gv, go, q, sk.get(), sv.get(), so.get(), sl.get());
                       return std::vector<Tensor>{grad};
                     },
                     {}, autograd::Backward::differentiable);
  }
  return result;
}

}  // namespace rumus
