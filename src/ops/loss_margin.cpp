// Margin and embedding losses with targets of 1 and -1: margin ranking,
// cosine embedding, triplet margin, soft margin, hinge embedding; and the
// multi-class margin loss over class indices. Composed
// of differentiable ops (PyTorch's formulas), so they run on every device
// and differentiate to any order.
#include "autocast.hpp"
#include "loss_util.hpp"
#include "op_util.hpp"
#include "rumus/ops/activation.hpp"
#include "rumus/ops/compare.hpp"
#include "rumus/ops/creation.hpp"
#include "rumus/ops/indexing.hpp"
#include "rumus/ops/elementwise.hpp"
#include "rumus/ops/reduction.hpp"

namespace rumus {

Tensor margin_ranking_loss(const Tensor& input1_in, const Tensor& input2_in, const Tensor& target_in, double margin,
                           Reduction reduction) {
  const char* op = "margin_ranking_loss";
  detail::check_reduction(op, reduction);
  const auto cast = detail::autocast(op, input1_in, input2_in, target_in);
  const Tensor &x1 = cast[0], &x2 = cast[1], &y = cast[2];
  detail::check_loss_pair(op, x1, x2, "input2");
  detail::check_loss_pair(op, x1, y);
  return detail::reduce_loss(op, relu(add(mul(neg(y), sub(x1, x2)), margin)), reduction);
}

Tensor cosine_embedding_loss(const Tensor& input1_in, const Tensor& input2_in, const Tensor& target_in, double margin,
                             Reduction reduction) {
  const char* op = "cosine_embedding_loss";
  detail::check_reduction(op, reduction);
  const auto cast = detail::autocast(op, input1_in, input2_in, target_in);
  const Tensor &x1 = cast[0], &x2 = cast[1], &y = cast[2];
  detail::check_loss_pair(op, x1, x2, "input2");
  detail::check_defined(op, y);
  detail::check_same_device(op, x1, y);
  if (x1.dim() != 1 && x1.dim() != 2)
    throw ShapeError(fmt::format("{}: expected inputs of shape [N, D] or [D], got {}", op, shape_str(x1.shape())));
  const Shape expected = x1.dim() == 2 ? Shape{x1.shape()[0]} : Shape{};
  if (y.shape() != expected)
    throw ShapeError(fmt::format("{}: expected target of shape {} for inputs {}, got {}", op, shape_str(expected),
                                 shape_str(x1.shape()), shape_str(y.shape())));
  // PyTorch's cosine: each squared norm gets 1e-12 before the square root.
  constexpr double eps = 1e-12;
  const std::int64_t d = x1.dim() - 1;
  Tensor dot = sum(mul(x1, x2), {d});
  Tensor norms = sqrt(mul(add(sum(square(x1), {d}), eps), add(sum(square(x2), {d}), eps)));
  Tensor cos = div(dot, norms);
  Tensor positive = where(eq(y, 1.0), sub(1.0, cos), 0.0);
  Tensor negative = where(eq(y, -1.0), relu(sub(cos, margin)), 0.0);
  return detail::reduce_loss(op, add(positive, negative), reduction);
}

namespace {
// torch.pairwise_distance: the p-norm of a - b + eps along the last dim.
Tensor pairwise_distance(const Tensor& a, const Tensor& b, double p, double eps) {
  Tensor d = add(sub(a, b), eps);
  const std::int64_t last = a.dim() - 1;
  if (p == 2.0) return sqrt(sum(square(d), {last}));
  if (p == 1.0) return sum(abs(d), {last});
  return pow(sum(pow(abs(d), p), {last}), 1.0 / p);
}
}  // namespace

Tensor triplet_margin_loss(const Tensor& anchor_in, const Tensor& positive_in, const Tensor& negative_in,
                           const TripletMarginLossOptions& o) {
  const char* op = "triplet_margin_loss";
  detail::check_reduction(op, o.reduction);
  if (!(o.p > 0)) throw ValueError(fmt::format("{}: expected a norm degree p > 0, got {}", op, o.p));
  const auto cast = detail::autocast(op, anchor_in, positive_in, negative_in);
  const Tensor &a = cast[0], &pos = cast[1], &negs = cast[2];
  detail::check_loss_pair(op, a, pos, "positive");
  detail::check_loss_pair(op, a, negs, "negative");
  if (a.dim() != 1 && a.dim() != 2)
    throw ShapeError(fmt::format("{}: expected inputs of shape [N, D] or [D], got {}", op, shape_str(a.shape())));
  Tensor d_pos = pairwise_distance(a, pos, o.p, o.eps);
  Tensor d_neg = pairwise_distance(a, negs, o.p, o.eps);
  // swap: the negative's distance to the positive, where it is the smaller one.
  if (o.swap) d_neg = minimum(d_neg, pairwise_distance(pos, negs, o.p, o.eps));
  return detail::reduce_loss(op, relu(add(sub(d_pos, d_neg), o.margin)), o.reduction);
}

Tensor multi_margin_loss(const Tensor& input_in, const Tensor& target, const MultiMarginLossOptions& o) {
  const char* op = "multi_margin_loss";
  detail::check_reduction(op, o.reduction);
  if (o.p != 1 && o.p != 2) throw ValueError(fmt::format("{}: expected p of 1 or 2, got {}", op, o.p));
  const Tensor input = detail::autocast(op, input_in)[0];
  detail::check_defined(op, input);
  detail::check_defined(op, target);
  detail::check_same_device(op, input, target);
  detail::check_floating(op, input);
  if (is_floating(target.dtype()))
    throw DTypeError(fmt::format("{}: expected integer class indices as target (i64), got {}", op,
                                 dtype_name(target.dtype())));
  if (input.dim() != 1 && input.dim() != 2)
    throw ShapeError(fmt::format("{}: expected input of shape [N, C] or [C], got {}", op, shape_str(input.shape())));
  const Shape expected = input.dim() == 2 ? Shape{input.shape()[0]} : Shape{};
  if (target.shape() != expected)
    throw ShapeError(fmt::format("{}: expected target of shape {} for input {}, got {}", op, shape_str(expected),
                                 shape_str(input.shape()), shape_str(target.shape())));
  const Tensor x = input.dim() == 2 ? input : input.unsqueeze(0);
  const std::int64_t n = x.shape()[0], c = x.shape()[1];
  const Tensor t = target.to(DType::i64).reshape({n, 1}).contiguous();
  detail::check_indices(op, "target index", t, c);
  // Every class's margin against the target's score, the target's own left out.
  Tensor h = relu(add(sub(x, gather(x, 1, t)), o.margin));
  if (o.p == 2) h = square(h);
  Tensor classes = arange(double(c), {.dtype = DType::i64, .device = x.device()}).reshape({1, c});
  h = where(ne(classes, t), h, 0.0);
  if (o.weight.defined()) {
    detail::check_same_device(op, x, o.weight);
    detail::check_floating(op, o.weight);
    if (o.weight.shape() != Shape{c})
      throw ShapeError(fmt::format("{}: expected weight of shape [{}] (one per class), got {}", op, c,
                                   shape_str(o.weight.shape())));
    h = mul(h, gather(o.weight.detach().to(x.dtype()), 0, t.reshape({n})).reshape({n, 1}));
  }
  Tensor per = div(sum(h, {1}), double(c));
  return detail::reduce_loss(op, input.dim() == 2 ? per : per.reshape({}), o.reduction);
}

Tensor soft_margin_loss(const Tensor& input_in, const Tensor& target_in, Reduction reduction) {
  const char* op = "soft_margin_loss";
  detail::check_reduction(op, reduction);
  const auto cast = detail::autocast(op, input_in, target_in);
  detail::check_loss_pair(op, cast[0], cast[1]);
  return detail::reduce_loss(op, softplus(neg(mul(cast[0], cast[1]))), reduction);
}

Tensor hinge_embedding_loss(const Tensor& input_in, const Tensor& target_in, double margin, Reduction reduction) {
  const char* op = "hinge_embedding_loss";
  detail::check_reduction(op, reduction);
  const auto cast = detail::autocast(op, input_in, target_in);
  const Tensor &x = cast[0], &y = cast[1];
  detail::check_loss_pair(op, x, y);
  // As PyTorch: the margin term where the target is not 1, x where it is not -1.
  Tensor margin_term = where(ne(y, 1.0), relu(sub(margin, x)), 0.0);
  Tensor self_term = where(ne(y, -1.0), x, 0.0);
  return detail::reduce_loss(op, add(margin_term, self_term), reduction);
}

}  // namespace rumus
