// Losses between an input and a target of its shape: l1, smooth l1, Huber,
// KL divergence and Poisson NLL. Composed of differentiable ops, so they run
// on every device and differentiate to any order.
#include <cmath>
#include <numbers>

#include "autocast.hpp"
#include "loss_util.hpp"
#include "op_util.hpp"
#include "rumus/ops/compare.hpp"
#include "rumus/ops/elementwise.hpp"
#include "rumus/ops/reduction.hpp"

namespace rumus {

Tensor l1_loss(const Tensor& input_in, const Tensor& target_in, Reduction reduction) {
  const char* op = "l1_loss";
  detail::check_reduction(op, reduction);
  const auto cast = detail::autocast(op, input_in, target_in);
  detail::check_loss_pair(op, cast[0], cast[1]);
  return detail::reduce_loss(op, abs(sub(cast[0], cast[1])), reduction);
}

namespace {
// 0.5 d^2 / beta * scale where |d| < beta, else (|d| - 0.5 beta) * scale:
// smooth l1 is scale 1, Huber (delta = beta) is scale beta.
Tensor quadratic_near_zero(const Tensor& input, const Tensor& target, double beta, double scale) {
  Tensor d = abs(sub(input, target));
  return where(lt(d, beta), mul(square(d), 0.5 * scale / beta), mul(sub(d, 0.5 * beta), scale));
}
}  // namespace

Tensor smooth_l1_loss(const Tensor& input_in, const Tensor& target_in, Reduction reduction, double beta) {
  const char* op = "smooth_l1_loss";
  detail::check_reduction(op, reduction);
  if (!(beta >= 0)) throw ValueError(fmt::format("smooth_l1_loss: expected beta >= 0, got {}", beta));
  const auto cast = detail::autocast(op, input_in, target_in);
  detail::check_loss_pair(op, cast[0], cast[1]);
  if (beta == 0) return detail::reduce_loss(op, abs(sub(cast[0], cast[1])), reduction);
  return detail::reduce_loss(op, quadratic_near_zero(cast[0], cast[1], beta, 1.0), reduction);
}

Tensor huber_loss(const Tensor& input_in, const Tensor& target_in, Reduction reduction, double delta) {
  const char* op = "huber_loss";
  detail::check_reduction(op, reduction);
  if (!(delta > 0)) throw ValueError(fmt::format("huber_loss: expected delta > 0, got {}", delta));
  const auto cast = detail::autocast(op, input_in, target_in);
  detail::check_loss_pair(op, cast[0], cast[1]);
  return detail::reduce_loss(op, quadratic_near_zero(cast[0], cast[1], delta, delta), reduction);
}

Tensor kl_div(const Tensor& input_in, const Tensor& target_in, Reduction reduction, bool log_target) {
  const char* op = "kl_div";
  detail::check_reduction(op, reduction, true);
  const auto cast = detail::autocast(op, input_in, target_in);
  const Tensor &input = cast[0], &target = cast[1];
  detail::check_loss_pair(op, input, target);
  Tensor per;
  if (log_target) {
    per = mul(exp(target), sub(target, input));
  } else {
    // target log(target) - target input, with 0 log 0 = 0 (PyTorch's xlogy):
    // log reads 1 where the target is 0, so its gradient stays finite.
    Tensor safe = where(eq(target, 0.0), 1.0, target);
    per = mul(target, sub(log(safe), input));
  }
  if (reduction == Reduction::batchmean) {
    Tensor total = sum(per);
    return input.dim() == 0 ? total : div(total, double(input.shape()[0]));
  }
  return detail::reduce_loss(op, per, reduction);
}

Tensor poisson_nll_loss(const Tensor& input_in, const Tensor& target_in, const PoissonNLLLossOptions& o) {
  const char* op = "poisson_nll_loss";
  detail::check_reduction(op, o.reduction);
  const auto cast = detail::autocast(op, input_in, target_in);
  const Tensor &input = cast[0], &target = cast[1];
  detail::check_loss_pair(op, input, target);
  Tensor per = o.log_input ? sub(exp(input), mul(target, input)) : sub(input, mul(target, log(add(input, o.eps))));
  if (o.full) {
    // Stirling's approximation of log(target!), where target > 1; the logs
    // read a safe 2 elsewhere so their gradient stays finite.
    Tensor above_one = gt(target, 1.0);
    Tensor t = where(above_one, target, 2.0);
    Tensor stirling = add(sub(mul(t, log(t)), t), mul(log(mul(t, 2.0 * std::numbers::pi)), 0.5));
    per = add(per, where(above_one, stirling, 0.0));
  }
  return detail::reduce_loss(op, per, o.reduction);
}

}  // namespace rumus
