// Losses. Cross-entropy is log_softmax + nll_loss; nll_loss picks one
// log-probability per row with the index_select kernel and scatters its
// gradient back with index_add.
#include "rumus/ops/loss.hpp"

#include <limits>

#include "autocast.hpp"
#include "op_util.hpp"
#include "rumus/ops/activation.hpp"
#include "rumus/ops/compare.hpp"
#include "rumus/ops/creation.hpp"
#include "rumus/ops/elementwise.hpp"
#include "rumus/ops/reduction.hpp"
#include "rumus/ops/softmax.hpp"

namespace rumus {

using autograd::SavedTensor;
using detail::arg;

Tensor mse_loss(const Tensor& input_in, const Tensor& target_in, Reduction reduction) {
  const auto cast = detail::autocast("mse_loss", input_in, target_in);
  const Tensor &input = cast[0], &target = cast[1];
  detail::check_same_device("mse_loss", input, target);
  detail::check_floating("mse_loss", input);
  if (input.shape() != target.shape())
    throw ShapeError(fmt::format("mse_loss: input shape {} differs from target shape {}", shape_str(input.shape()),
                                 shape_str(target.shape())));
  Tensor sq = square(sub(input, target));
  switch (reduction) {
    case Reduction::none: return sq;
    case Reduction::sum: return sum(sq);
    case Reduction::mean: return mean(sq);
  }
  return sq;
}

namespace {

// Class scores [N, C, d...] (or [C]) with targets [N, d...] (or []) as rows [M, C] and targets [M].
struct ClassRows {
  Tensor rows;     // [M, C], taped
  Tensor target;   // [M] i64, ignored entries replaced by 0
  Tensor valid;    // [M] in the scores' dtype: 1 where the target is not ignore_index
  Shape target_shape;
};

ClassRows class_rows(const char* op, const Tensor& scores, const Tensor& target, std::int64_t ignore_index) {
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
    detail::kernels(op, Kernel::index_select, rows)
        .index_select(arg(out, Layout::contiguous({m, 1, 1})), arg(src, src3), arg(index, index2));
  if (autograd::needs_grad({&rows}))
    autograd::record(op, {rows}, out, [op, m, c, si = SavedTensor(index)](const Tensor& g) {
      Tensor gi = zeros({m, c}, {.dtype = g.dtype(), .device = g.device()});
      Tensor gc = g.contiguous();
      const Tensor& index = si.get();
      if (m > 0)
        detail::kernels(op, Kernel::index_add, g)
            .index_add(arg(gi, Layout::contiguous({m, c, 1})), arg(index, Layout::contiguous({m, 1}, index.offset())),
                       arg(gc, Layout::contiguous({m, 1, 1}, gc.offset())));
      return std::vector<Tensor>{gi};
    });
  return out;
}

Tensor reduce_rows(const Tensor& per_row, const Tensor& valid, const Shape& shape, Reduction reduction) {
  switch (reduction) {
    case Reduction::none: return per_row.reshape(shape);
    case Reduction::sum: return sum(per_row);
    case Reduction::mean: {
      // Mean over non-ignored targets. With every target ignored PyTorch gives
      // a NaN loss (0/0) but zero gradients (nothing is selected): divide by at
      // least 1 so the backward never forms 0 * inf, and add the NaN off the tape.
      Tensor count = sum(valid);
      Tensor loss = div(sum(per_row), clamp(count, 1.0, std::numeric_limits<double>::quiet_NaN()));
      Tensor none_counted = where(eq(count, 0.0), std::numeric_limits<double>::quiet_NaN(), zeros_like(count));
      return add(loss, none_counted);
    }
  }
  return per_row;
}

Tensor nll_impl(const char* op, const Tensor& log_probs, const Tensor& target, Reduction reduction,
                std::int64_t ignore_index, double smoothing) {
  ClassRows r = class_rows(op, log_probs, target, ignore_index);
  Tensor nll = mul(neg(pick(op, r.rows, r.target)), r.valid);
  Tensor loss = reduce_rows(nll, r.valid, r.target_shape, reduction);
  if (smoothing == 0.0) return loss;
  // PyTorch's label smoothing: mix in the uniform distribution's cross-entropy,
  // -mean_c log p_c, with weight smoothing; ignored rows contribute nothing.
  const double c = double(r.rows.shape()[1]);
  Tensor uniform_ce = mul(neg(sum(r.rows, {1})), r.valid);
  Tensor smooth = reduce_rows(uniform_ce, r.valid, r.target_shape, reduction);
  return add(mul(loss, 1.0 - smoothing), mul(smooth, smoothing / c));
}

}  // namespace

Tensor nll_loss(const Tensor& log_probs, const Tensor& target, Reduction reduction, std::int64_t ignore_index) {
  return nll_impl("nll_loss", detail::autocast("nll_loss", log_probs)[0], target, reduction, ignore_index, 0.0);
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
  return nll_impl(op, log_softmax(logits, logits.dim() == 1 ? 0 : 1), target, o.reduction, o.ignore_index,
                  o.label_smoothing);
}

Tensor binary_cross_entropy_with_logits(const Tensor& logits_in, const Tensor& target_in, Reduction reduction) {
  const char* op = "binary_cross_entropy_with_logits";
  const auto cast = detail::autocast(op, logits_in, target_in);
  const Tensor &logits = cast[0], &target = cast[1];
  detail::check_same_device(op, logits, target);
  detail::check_floating(op, logits);
  if (target.dtype() != logits.dtype())
    throw DTypeError(fmt::format("{}: target dtype {} differs from input dtype {}", op, dtype_name(target.dtype()),
                                 dtype_name(logits.dtype())));
  if (logits.shape() != target.shape())
    throw ShapeError(fmt::format("{}: input shape {} differs from target shape {}", op, shape_str(logits.shape()),
                                 shape_str(target.shape())));
  Tensor per;
  {
    // max(x, 0) - x*y + log(1 + exp(-|x|)): stable for large |x|.
    NoGradGuard no_grad;
    Tensor x = logits.detach(), y = target.detach();
    per = add(sub(relu(x), mul(x, y)), log(add(exp(neg(abs(x))), 1.0)));
  }
  if (autograd::needs_grad({&logits, &target}))
    autograd::record(op, {logits, target}, per,
                     [gx = logits.requires_grad(), gy = target.requires_grad(), sx = SavedTensor(logits.detach()),
                      sy = SavedTensor(target.detach())](const Tensor& g) {
                       const Tensor& x = sx.get();
                       return std::vector<Tensor>{gx ? mul(g, sub(sigmoid(x), sy.get())) : Tensor(),
                                                  gy ? mul(g, neg(x)) : Tensor()};
                     });
  switch (reduction) {
    case Reduction::none: return per;
    case Reduction::sum: return sum(per);
    case Reduction::mean: return mean(per);
  }
  return per;
}

}  // namespace rumus
