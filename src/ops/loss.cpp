// Losses on classes and probabilities, and the reduction every loss shares.
// Cross-entropy is log_softmax + nll_loss. Their common case (class indices,
// no class weights, no label smoothing, a mean or a sum, [N, C] scores) runs
// the nll kernels: one pass forward, one backward (for cross_entropy through
// log_softmax too). Otherwise nll_loss picks one log-probability per row with
// the index_select kernel and scatters its gradient back with index_add
// (scatter_add, differentiable, under create_graph), and the weights, the
// smoothing and the reduction are ops of their own.
#include "rumus/ops/loss.hpp"

#include <limits>

#include "loss_util.hpp"

#include "autocast.hpp"
#include "op_util.hpp"
#include "../backend/gather.hpp"
#include "../backend/nll.hpp"
#include "rumus/ops/activation.hpp"
#include "rumus/ops/compare.hpp"
#include "rumus/ops/creation.hpp"
#include "rumus/ops/elementwise.hpp"
#include "rumus/ops/indexing.hpp"
#include "rumus/ops/reduction.hpp"
#include "rumus/ops/softmax.hpp"

namespace rumus {

using autograd::SavedTensor;
using detail::arg;

Reduction::Reduction(std::string_view name) : kind_(invalid), name_(name) {
  if (name == "none") kind_ = none;
  else if (name == "mean") kind_ = mean;
  else if (name == "sum") kind_ = sum;
  else if (name == "batchmean") kind_ = batchmean;
}

std::string Reduction::name() const {
  if (!name_.empty() || kind_ == invalid) return name_;
  switch (kind_) {
    case none: return "none";
    case mean: return "mean";
    case sum: return "sum";
    default: return "batchmean";
  }
}

namespace detail {

void check_reduction(const char* op, const Reduction& r, bool allow_batchmean) {
  if (r == Reduction::none || r == Reduction::mean || r == Reduction::sum) return;
  if (allow_batchmean && r == Reduction::batchmean) return;
  throw ValueError(fmt::format("{}: expected reduction 'none', 'mean'{} or 'sum', got '{}'", op,
                               allow_batchmean ? ", 'batchmean'" : "", r.name()));
}

Tensor reduce_loss(const char* op, const Tensor& per, const Reduction& r) {
  check_reduction(op, r);
  if (r == Reduction::sum) return sum(per);
  if (r == Reduction::mean) return mean(per);
  return per;
}

void check_loss_pair(const char* op, const Tensor& input, const Tensor& other, const char* what) {
  check_defined(op, input);
  check_defined(op, other);
  check_same_device(op, input, other);
  check_floating(op, input);
  if (input.shape() != other.shape())
    throw ShapeError(fmt::format("{}: input shape {} differs from {} shape {}", op, shape_str(input.shape()), what,
                                 shape_str(other.shape())));
}

void check_broadcasts_to(const char* op, const char* what, const Tensor& t, const Shape& shape) {
  const Shape& s = t.shape();
  bool fits = s.size() <= shape.size();
  for (std::size_t i = 0; fits && i < s.size(); ++i) {
    const std::int64_t d = s[s.size() - 1 - i];
    fits = d == 1 || d == shape[shape.size() - 1 - i];
  }
  if (!fits)
    throw ShapeError(fmt::format("{}: {} of shape {} does not broadcast to the input's shape {}", op, what,
                                 shape_str(s), shape_str(shape)));
}

}  // namespace detail

Tensor mse_loss(const Tensor& input_in, const Tensor& target_in, Reduction reduction) {
  detail::check_reduction("mse_loss", reduction);
  const auto cast = detail::autocast("mse_loss", input_in, target_in);
  const Tensor &input = cast[0], &target = cast[1];
  detail::check_loss_pair("mse_loss", input, target);
  return detail::reduce_loss("mse_loss", square(sub(input, target)), reduction);
}

namespace {

// Class scores [N, C, d...] (or [C]) with targets [N, d...] (or []) as rows [M, C] and targets [M].
struct ClassRows {
  Tensor rows;     // [M, C], taped
  Tensor target;   // [M] i64, ignored entries replaced by 0
  Tensor valid;    // [M] in the scores' dtype: 1 where the target is not ignore_index
  Shape target_shape;
};

// The checks of class scores and their targets; the targets' shape.
Shape check_class_target(const char* op, const Tensor& scores, const Tensor& target) {
  detail::check_same_device(op, scores, target);
  detail::check_floating(op, scores);
  if (is_floating(target.dtype()))
    throw DTypeError(fmt::format("{}: expected integer class indices as target (i64), got {}", op,
                                 dtype_name(target.dtype())));
  if (scores.dim() < 1)
    throw ShapeError(fmt::format("{}: expected input of shape [N, C] or [N, C, d...], got {}", op,
                                 shape_str(scores.shape())));
  Shape expected = scores.shape();
  if (scores.dim() == 1) expected = {};
  else expected.erase(expected.begin() + 1);
  if (target.shape() != expected)
    throw ShapeError(fmt::format("{}: expected target of shape {} for input {}, got {}", op, shape_str(expected),
                                 shape_str(scores.shape()), shape_str(target.shape())));
  return expected;
}

ClassRows class_rows(const char* op, const Tensor& scores, const Tensor& target, std::int64_t ignore_index) {
  const Shape expected = check_class_target(op, scores, target);
  const std::int64_t c = scores.dim() == 1 ? scores.shape()[0] : scores.shape()[1];
  ClassRows r;
  r.target_shape = expected;
  if (scores.dim() <= 2) {
    r.rows = scores.reshape({-1, c});
  } else {
    std::vector<std::int64_t> perm{0};
    for (std::int64_t d = 2; d < scores.dim(); ++d) perm.push_back(d);
    perm.push_back(1);
    r.rows = scores.permute(perm).reshape({-1, c});
  }
  Tensor t = target.to(DType::i64).reshape({-1});
  Tensor valid = ne(t, full({}, double(ignore_index), {.dtype = DType::i64, .device = t.device()}));
  r.target = where(valid, t, zeros({}, {.dtype = DType::i64, .device = t.device()}));
  r.valid = valid.to(scores.dtype());
  return r;
}

// out[i] = rows[i, target[i]]; gradient scattered back into the picked entries.
Tensor pick(const char* op, const Tensor& rows, const Tensor& target) {
  const std::int64_t m = rows.shape()[0], c = rows.shape()[1];
  Tensor src = rows.detach().contiguous();
  Tensor index = target.contiguous();
  const Layout src3 = Layout::contiguous({m, c, 1}, src.offset());
  const Layout index2 = Layout::contiguous({m, 1}, index.offset());
  Tensor out = detail::alloc({m}, rows.dtype(), rows.device());
  detail::check_indices(op, "target index", index, c);
  if (m > 0)
    detail::kernel<IndexSelectKernel>(op, rows)(arg(out, Layout::contiguous({m, 1, 1})), arg(src, src3), arg(index, index2));
  if (autograd::needs_grad({&rows}))
    autograd::record(
        op, {rows}, out,
        [op, m, c, si = SavedTensor(index)](const Tensor& g) {
      Tensor gi = zeros({m, c}, {.dtype = g.dtype(), .device = g.device()});
      const Tensor& index = si.get();
      // Under create_graph: the same scatter as an op, whose own gradient is a gather.
      if (grad_enabled()) return std::vector<Tensor>{scatter_add(gi, 1, index.reshape({m, 1}), g.reshape({m, 1}))};
      Tensor gc = g.contiguous();
      if (m > 0)
        detail::kernel<IndexAddKernel>(op, g)(arg(gi, Layout::contiguous({m, c, 1})), arg(index, Layout::contiguous({m, 1}, index.offset())),
                       arg(gc, Layout::contiguous({m, 1, 1}, gc.offset())));
      return std::vector<Tensor>{gi};
        },
        {}, autograd::Backward::differentiable);
  return out;
}

// weight: each row's weight, 0 for an ignored target; the mean divides by
// their sum, PyTorch's weighted mean.
Tensor reduce_rows(const Tensor& per_row, const Tensor& weight, const Shape& shape, const Reduction& reduction) {
  if (reduction == Reduction::none) return per_row.reshape(shape);
  if (reduction == Reduction::sum) return sum(per_row);
  // With every target ignored PyTorch gives a NaN loss (0/0) but zero
  // gradients (nothing is selected): divide by 1 instead of 0 so the backward
  // never forms 0 * inf, and add the NaN off the tape.
  Tensor total = sum(weight);
  Tensor none_counted = eq(total, 0.0);
  Tensor loss = div(sum(per_row), where(none_counted, 1.0, total));
  return add(loss, where(none_counted, std::numeric_limits<double>::quiet_NaN(), zeros_like(total)));
}

// The class weights checked and read per row (0 where the target is ignored).
Tensor row_weights(const char* op, const ClassRows& r, const Tensor& weight) {
  if (!weight.defined()) return r.valid;
  detail::check_same_device(op, r.rows, weight);
  detail::check_floating(op, weight);
  const std::int64_t c = r.rows.shape()[1];
  if (weight.shape() != Shape{c})
    throw ShapeError(fmt::format("{}: expected weight of shape [{}] (one per class), got {}", op, c,
                                 shape_str(weight.shape())));
  // Class weights are constants, as in PyTorch (no gradient).
  return mul(gather(weight.detach().to(r.rows.dtype()), 0, r.target), r.valid);
}

// Whether the nll kernels take this call (after check_class_target).
bool takes_nll_kernels(const Tensor& scores, const Reduction& reduction, double smoothing, const Tensor& weight) {
  return smoothing == 0.0 && !weight.defined() && reduction != Reduction::none && scores.dim() == 2 &&
         detail::has_kernels<NllForwardKernel, NllBackwardKernel>(scores);
}

// nll_loss of log-probabilities, or cross_entropy of logits (`logits`), by
// the nll kernels. The gradient is one kernel; under create_graph it is
// written with ops on the saved scores, so the loss differentiates twice.
Tensor nll_by_kernels(const char* op, const Tensor& scores, const Tensor& target_in, bool mean,
                      std::int64_t ignore_index, bool logits) {
  const std::int64_t c = scores.shape()[1];
  const Tensor target = target_in.to(DType::i64).contiguous();
  detail::check_indices(op, "target index", target, c, ignore_index);  // on a GPU: the kernel, at the next wait
  Tensor log_probs;
  {
    NoGradGuard no_grad;
    log_probs = logits ? log_softmax(scores.detach(), 1) : scores.detach().contiguous();
  }
  Tensor loss = detail::alloc({}, scores.dtype(), scores.device());
  Tensor count = detail::alloc({}, scores.dtype(), scores.device());
  detail::kernel<NllForwardKernel>(op, log_probs)(arg(loss), arg(count), arg(log_probs), arg(target), ignore_index,
                                                  mean);
  if (autograd::needs_grad({&scores}))
    autograd::record(
        op, {scores}, loss,
        [op, mean, ignore_index, logits, c, ss = SavedTensor(scores), log_probs, count, target](const Tensor& g) {
          if (grad_enabled()) {
            // s_i (softmax(x)_i - onehot_i), or -s_i onehot_i: ops, taped.
            const Tensor& x = ss.get();
            Tensor valid =
                ne(target, full({}, double(ignore_index), {.dtype = DType::i64, .device = target.device()})).to(x.dtype());
            Tensor s = mul(valid, g);
            if (mean) s = div(s, count);
            Tensor onehot = eq(arange(double(c), {.dtype = DType::i64, .device = target.device()}).reshape({1, c}),
                               target.reshape({-1, 1}))
                                .to(x.dtype());
            Tensor per = logits ? sub(softmax(x, 1), onehot) : neg(onehot);
            return std::vector<Tensor>{mul(per, s.reshape({-1, 1}))};
          }
          Tensor grad = detail::alloc(log_probs.shape(), log_probs.dtype(), log_probs.device());
          const Tensor gc = g.contiguous();
          detail::kernel<NllBackwardKernel>(op, log_probs)(arg(grad), arg(gc), arg(count), arg(log_probs),
                                                           arg(target), ignore_index, mean, logits);
          return std::vector<Tensor>{grad};
        },
        {}, autograd::Backward::differentiable);
  return loss;
}

Tensor nll_impl(const char* op, const Tensor& log_probs, const Tensor& target, const Reduction& reduction,
                std::int64_t ignore_index, double smoothing, const Tensor& weight) {
  detail::check_reduction(op, reduction);
  check_class_target(op, log_probs, target);
  if (takes_nll_kernels(log_probs, reduction, smoothing, weight))
    return nll_by_kernels(op, log_probs, target, reduction == Reduction::mean, ignore_index, false);
  ClassRows r = class_rows(op, log_probs, target, ignore_index);
  Tensor picked = pick(op, r.rows, r.target);
  Tensor w = row_weights(op, r, weight);
  Tensor nll = mul(neg(picked), w);
  Tensor loss = reduce_rows(nll, w, r.target_shape, reduction);
  if (smoothing == 0.0) return loss;
  // PyTorch's label smoothing: mix in the uniform distribution's cross-entropy,
  // -mean_c w_c log p_c, with weight smoothing; ignored rows contribute
  // nothing, and the weighted mean divides by the targets' weights as above.
  const double c = double(r.rows.shape()[1]);
  Tensor scores = weight.defined() ? mul(r.rows, weight.detach().to(r.rows.dtype())) : r.rows;
  Tensor uniform_ce = mul(neg(sum(scores, {1})), r.valid);
  Tensor smooth = reduce_rows(uniform_ce, w, r.target_shape, reduction);
  return add(mul(loss, 1.0 - smoothing), mul(smooth, smoothing / c));
}

}  // namespace

Tensor nll_loss(const Tensor& log_probs, const Tensor& target, Reduction reduction, std::int64_t ignore_index) {
  return nll_impl("nll_loss", detail::autocast("nll_loss", log_probs)[0], target, reduction, ignore_index, 0.0, {});
}

Tensor nll_loss(const Tensor& log_probs, const Tensor& target, const NLLLossOptions& o) {
  return nll_impl("nll_loss", detail::autocast("nll_loss", log_probs)[0], target, o.reduction, o.ignore_index, 0.0,
                  o.weight);
}

Tensor cross_entropy(const Tensor& logits_in, const Tensor& target, const CrossEntropyOptions& o) {
  const char* op = "cross_entropy";
  const Tensor logits = detail::autocast(op, logits_in)[0];
  detail::check_floating(op, logits);
  if (!(o.label_smoothing >= 0.0 && o.label_smoothing <= 1.0))
    throw Error(fmt::format("cross_entropy: expected label_smoothing in [0, 1], got {}", o.label_smoothing));
  if (logits.dim() < 1)
    throw ShapeError(fmt::format("cross_entropy: expected input of shape [N, C] or [N, C, d...], got {}",
                                 shape_str(logits.shape())));
  detail::check_reduction(op, o.reduction);
  check_class_target(op, logits, target);
  if (takes_nll_kernels(logits, o.reduction, o.label_smoothing, o.weight))
    return nll_by_kernels(op, logits, target, o.reduction == Reduction::mean, o.ignore_index, true);
  return nll_impl(op, log_softmax(logits, logits.dim() == 1 ? 0 : 1), target, o.reduction, o.ignore_index,
                  o.label_smoothing, o.weight);
}

namespace {
void check_binary_pair(const char* op, const Tensor& input, const Tensor& target) {
  detail::check_loss_pair(op, input, target);
  if (target.dtype() != input.dtype())
    throw DTypeError(fmt::format("{}: target dtype {} differs from input dtype {}", op, dtype_name(target.dtype()),
                                 dtype_name(input.dtype())));
}

// An optional weight of the input's dtype, checked to broadcast to it.
Tensor broadcast_weight(const char* op, const char* what, const Tensor& w, const Tensor& input) {
  if (!w.defined()) return w;
  detail::check_same_device(op, input, w);
  detail::check_floating(op, w);
  detail::check_broadcasts_to(op, what, w, input.shape());
  return w.to(input.dtype());
}
}  // namespace

Tensor binary_cross_entropy_with_logits(const Tensor& logits_in, const Tensor& target_in, Reduction reduction) {
  const char* op = "binary_cross_entropy_with_logits";
  detail::check_reduction(op, reduction);
  const auto cast = detail::autocast(op, logits_in, target_in);
  const Tensor &logits = cast[0], &target = cast[1];
  check_binary_pair(op, logits, target);
  Tensor per;
  {
    // max(x, 0) - x*y + log(1 + exp(-|x|)): stable for large |x|.
    NoGradGuard no_grad;
    Tensor x = logits.detach(), y = target.detach();
    per = add(sub(relu(x), mul(x, y)), log(add(exp(neg(abs(x))), 1.0)));
  }
  // The gradient is written with ops on the saved inputs: under create_graph
  // it records, so the loss differentiates twice.
  if (autograd::needs_grad({&logits, &target}))
    autograd::record(
        op, {logits, target}, per,
        [gx = logits.requires_grad(), gy = target.requires_grad(), sx = SavedTensor(logits),
         sy = SavedTensor(target)](const Tensor& g) {
          const Tensor& x = sx.get();
          return std::vector<Tensor>{gx ? mul(g, sub(sigmoid(x), sy.get())) : Tensor(), gy ? mul(g, neg(x)) : Tensor()};
        },
        {}, autograd::Backward::differentiable);
  return detail::reduce_loss(op, per, reduction);
}

Tensor binary_cross_entropy_with_logits(const Tensor& logits_in, const Tensor& target_in,
                                        const BCEWithLogitsOptions& o) {
  const char* op = "binary_cross_entropy_with_logits";
  if (!o.weight.defined() && !o.pos_weight.defined())
    return binary_cross_entropy_with_logits(logits_in, target_in, o.reduction);
  detail::check_reduction(op, o.reduction);
  const auto cast = detail::autocast(op, logits_in, target_in);
  const Tensor &x = cast[0], &y = cast[1];
  check_binary_pair(op, x, y);
  const Tensor weight = broadcast_weight(op, "weight", o.weight, x);
  const Tensor pos_weight = broadcast_weight(op, "pos_weight", o.pos_weight, x);
  // PyTorch's form: (1 - y) x + (1 + (pos_weight - 1) y) log(1 + exp(-x)),
  // composed, so weight and pos_weight get gradients too.
  Tensor softplus_neg = softplus(neg(x));
  Tensor positive = pos_weight.defined() ? mul(add(mul(sub(pos_weight, 1.0), y), 1.0), softplus_neg) : softplus_neg;
  Tensor per = add(mul(sub(1.0, y), x), positive);
  if (weight.defined()) per = mul(per, weight);
  return detail::reduce_loss(op, per, o.reduction);
}

Tensor binary_cross_entropy(const Tensor& input_in, const Tensor& target_in, const Tensor& weight_in,
                            Reduction reduction) {
  const char* op = "binary_cross_entropy";
  detail::check_reduction(op, reduction);
  const auto cast = detail::autocast(op, input_in, target_in);
  const Tensor &x = cast[0], &y = cast[1];
  check_binary_pair(op, x, y);
  const Tensor weight = broadcast_weight(op, "weight", weight_in, x);
  // log clamped at -100 as PyTorch's, so x = 0 or 1 gives a finite loss; log
  // reads 1 where x is 0, so no 0 * inf reaches the gradient.
  auto clamped_log = [](const Tensor& p) {
    Tensor positive = gt(p, 0.0);
    return where(positive, clamp(log(where(positive, p, 1.0)), -100.0, std::numeric_limits<double>::quiet_NaN()),
                 -100.0);
  };
  Tensor per = neg(add(mul(y, clamped_log(x)), mul(sub(1.0, y), clamped_log(sub(1.0, x)))));
  if (weight.defined()) per = mul(per, weight);
  return detail::reduce_loss(op, per, reduction);
}

}  // namespace rumus
