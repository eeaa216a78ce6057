#include "rumus/optim/lbfgs.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "rumus/autograd/grad_mode.hpp"
#include "rumus/ops/creation.hpp"
#include "rumus/ops/elementwise.hpp"
#include "rumus/ops/join.hpp"
#include "rumus/ops/reduction.hpp"

namespace rumus::optim {

namespace {
// Grad mode on for the closure's forward and backward, whatever the caller's.
struct EnableGrad {
  bool previous = grad_enabled();
  EnableGrad() { set_grad_enabled(true); }
  ~EnableGrad() { set_grad_enabled(previous); }
};
double dot(const Tensor& a, const Tensor& b) { return sum(mul(a, b)).item(); }
double abs_max(const Tensor& a) { return amax(abs(a), {0}).item(); }

// The minimiser of the cubic through (x1, f1) and (x2, f2) with slopes g1 and
// g2, clamped to the bounds (the bracket when none are given); their midpoint
// when the cubic has no minimum.
double cubic_interpolate(double x1, double f1, double g1, double x2, double f2, double g2,
                         std::optional<std::pair<double, double>> bounds = std::nullopt) {
  auto [lo, hi] = bounds ? *bounds : (x1 <= x2 ? std::pair{x1, x2} : std::pair{x2, x1});
  const double d1 = g1 + g2 - 3 * (f1 - f2) / (x1 - x2);
  const double d2_square = d1 * d1 - g1 * g2;
  if (d2_square < 0) return (lo + hi) / 2;
  const double d2 = std::sqrt(d2_square);
  const double min_pos = x1 <= x2 ? x2 - (x2 - x1) * ((g2 + d2 - d1) / (g2 - g1 + 2 * d2))
                                  : x1 - (x1 - x2) * ((g1 + d2 - d1) / (g1 - g2 + 2 * d2));
  return std::min(std::max(min_pos, lo), hi);
}
}  // namespace

LBFGS::LBFGS(std::vector<Tensor> params, LBFGSOptions o)
    : Optimizer(single_group(std::move(params)), o.lr, 0.0, "LBFGS",
                {{"max_iter", double(o.max_iter)},
                 {"max_eval", double(o.max_eval.value_or(o.max_iter * 5 / 4))},
                 {"tolerance_grad", o.tolerance_grad},
                 {"tolerance_change", o.tolerance_change},
                 {"history_size", double(o.history_size)}}),
      options(o) {
  if (o.max_iter < 1) throw Error(fmt::format("LBFGS: expected max_iter >= 1, got {}", o.max_iter));
  if (o.history_size < 1) throw Error(fmt::format("LBFGS: expected history_size >= 1, got {}", o.history_size));
  if (!o.line_search_fn.empty() && o.line_search_fn != "strong_wolfe")
    throw ValueError(fmt::format("LBFGS: expected line_search_fn \"\" or \"strong_wolfe\", got \"{}\"", o.line_search_fn));
}

void LBFGS::update(Tensor&, const Tensor&, ParamState&, const Group&) {
  throw Error("LBFGS.step: expected a closure that computes and returns the loss (opt.step([&] { return loss(); })), "
              "got gradients");
}

namespace {
Tensor f64_value(double v) { return full({}, v, {.dtype = DType::f64}); }
}  // namespace

void LBFGS::save_extra(StateDict& out) const {
  out["extra.n_iter"] = full({}, double(n_iter_), {.dtype = DType::i64});
  out["extra.func_evals"] = full({}, double(func_evals_), {.dtype = DType::i64});
  if (n_iter_ == 0) return;
  out["extra.d"] = d_.detach();
  out["extra.prev_flat_grad"] = prev_flat_grad_.detach();
  out["extra.t"] = f64_value(t_);
  out["extra.h_diag"] = f64_value(h_diag_);
  out["extra.prev_loss"] = f64_value(prev_loss_);
  out["extra.ro"] = tensor(ro_, {std::int64_t(ro_.size())}, {.dtype = DType::f64});
  for (std::size_t i = 0; i < old_dirs_.size(); ++i) {
    out[fmt::format("extra.old_dirs.{}", i)] = old_dirs_[i].detach();
    out[fmt::format("extra.old_stps.{}", i)] = old_steps_[i].detach();
  }
}

void LBFGS::load_extra(const StateDict& state) {
  auto need = [&](const std::string& key) -> const Tensor& {
    auto it = state.find(key);
    if (it == state.end()) throw Error(fmt::format("LBFGS.load_state_dict: the state dict has no '{}'", key));
    return it->second;
  };
  const auto n_iter = std::int64_t(need("extra.n_iter").item()), func_evals = std::int64_t(need("extra.func_evals").item());
  std::int64_t total = 0;
  for (const Tensor& p : param_groups().front().params) total += p.numel();
  const Tensor& like = param_groups().front().params.front();
  auto flat = [&](const std::string& key) {
    const Tensor& t = need(key);
    if (t.shape() != Shape{total})
      throw ShapeError(fmt::format("LBFGS.load_state_dict: '{}' has shape {}, expected [{}] (every parameter, flat)",
                                   key, shape_str(t.shape()), total));
    return t.detach().to(like.dtype()).to(like.device()).clone();
  };
  Tensor d, prev;
  std::vector<Tensor> dirs, steps;
  std::vector<double> ro;
  double t = 0, h_diag = 1, prev_loss = 0;
  if (n_iter > 0) {
    d = flat("extra.d"), prev = flat("extra.prev_flat_grad");
    t = need("extra.t").item(), h_diag = need("extra.h_diag").item(), prev_loss = need("extra.prev_loss").item();
    ro = need("extra.ro").to(DType::f64).to_vector<double>();
    for (std::size_t i = 0; i < ro.size(); ++i) {
      dirs.push_back(flat(fmt::format("extra.old_dirs.{}", i)));
      steps.push_back(flat(fmt::format("extra.old_stps.{}", i)));
    }
  }
  const std::size_t expected = 2 + (n_iter > 0 ? 6 + 2 * ro.size() : 0);
  std::size_t present = 0;
  for (auto it = state.lower_bound("extra."); it != state.end() && it->first.starts_with("extra."); ++it) ++present;
  if (present != expected)
    throw Error(fmt::format("LBFGS.load_state_dict: expected {} 'extra.' entries for a history of {}, got {}", expected,
                            ro.size(), present));
  d_ = d, prev_flat_grad_ = prev, old_dirs_ = std::move(dirs), old_steps_ = std::move(steps), ro_ = std::move(ro);
  t_ = t, h_diag_ = h_diag, prev_loss_ = prev_loss, n_iter_ = n_iter, func_evals_ = func_evals;
}

Tensor LBFGS::flat_grad(const GradientStore& grads) const {
  std::vector<Tensor> flat;
  for (const Tensor& p : param_groups().front().params) {
    Tensor g = grads.get(p);
    flat.push_back(g.defined() ? g.reshape({-1}) : zeros({p.numel()}, {.dtype = p.dtype(), .device = p.device()}));
  }
  return cat(flat, 0);
}

void LBFGS::add_to_params(double t, const Tensor& d) {
  NoGradGuard no_grad;
  std::int64_t at = 0;
  for (Tensor& p : param_groups().front().params) {
    p.add_(d.narrow(0, at, p.numel()).reshape(p.shape()), t);
    at += p.numel();
  }
}

void LBFGS::set_params(const std::vector<Tensor>& values) {
  NoGradGuard no_grad;
  auto& params = param_groups().front().params;
  for (std::size_t i = 0; i < params.size(); ++i) params[i].copy_(values[i]);
}

std::pair<double, Tensor> LBFGS::evaluate(const Closure& closure) {
  Tensor loss = closure();
  if (!loss.defined() || loss.numel() != 1)
    throw ShapeError(fmt::format("LBFGS.step: expected the closure to return the loss, one element, got {}",
                                 loss.defined() ? shape_str(loss.shape()) : "an undefined tensor"));
  const double value = loss.item();
  GradientStore grads = backward(loss);
  NoGradGuard no_grad;
  return {value, flat_grad(grads)};
}

std::pair<double, Tensor> LBFGS::evaluate_at(const Closure& closure, const std::vector<Tensor>& x, double t,
                                             const Tensor& d) {
  add_to_params(t, d);
  auto result = evaluate(closure);
  set_params(x);
  return result;
}

LBFGS::LineSearch LBFGS::strong_wolfe(const Closure& closure, const std::vector<Tensor>& x, double t, const Tensor& d,
                                      double f, const Tensor& g, double gtd) {
  // Moré and Thuente's conditions, bracketing then zooming with cubic
  // interpolation (PyTorch's port of minFunc), with its constants.
  const double c1 = 1e-4, c2 = 0.9, tolerance_change = 1e-9;
  const int max_ls = 25;
  const double d_norm = abs_max(d);
  auto [f_new, g_new] = evaluate_at(closure, x, t, d);
  std::int64_t evals = 1;
  double gtd_new = dot(g_new, d);
  double t_prev = 0, f_prev = f, gtd_prev = gtd;
  Tensor g_prev = g;
  bool done = false;
  int ls_iter = 0;
  std::vector<double> bracket, bracket_f, bracket_gtd;
  std::vector<Tensor> bracket_g;
  while (ls_iter < max_ls) {
    const bool sufficient_decrease = !(f_new > f + c1 * t * gtd || (ls_iter > 1 && f_new >= f_prev));
    if (sufficient_decrease && std::abs(gtd_new) <= -c2 * gtd) {  // both conditions hold: done
      bracket = {t}, bracket_f = {f_new}, bracket_g = {g_new}, bracket_gtd = {gtd_new};
      done = true;
      break;
    }
    if (!sufficient_decrease || gtd_new >= 0) {  // a minimum lies between the last two trials
      bracket = {t_prev, t}, bracket_f = {f_prev, f_new}, bracket_g = {g_prev, g_new}, bracket_gtd = {gtd_prev, gtd_new};
      break;
    }
    // Extrapolate: the next trial lies between just past t and ten times t.
    const double next = cubic_interpolate(t_prev, f_prev, gtd_prev, t, f_new, gtd_new,
                                          std::pair{t + 0.01 * (t - t_prev), t * 10});
    t_prev = t, f_prev = f_new, g_prev = g_new, gtd_prev = gtd_new;
    t = next;
    std::tie(f_new, g_new) = evaluate_at(closure, x, t, d);
    ++evals;
    gtd_new = dot(g_new, d);
    ++ls_iter;
  }
  if (ls_iter == max_ls) bracket = {0, t}, bracket_f = {f, f_new}, bracket_g = {g, g_new}, bracket_gtd = {gtd, gtd_new};

  // Zoom: shrink the bracket until a point meets both conditions.
  bool insufficient_progress = false;
  std::size_t low = bracket_f.front() <= bracket_f.back() ? 0 : 1, high = 1 - low;
  while (!done && ls_iter < max_ls) {
    if (std::abs(bracket[1] - bracket[0]) * d_norm < tolerance_change) break;
    t = cubic_interpolate(bracket[0], bracket_f[0], bracket_gtd[0], bracket[1], bracket_f[1], bracket_gtd[1]);
    const double hi = std::max(bracket[0], bracket[1]), lo = std::min(bracket[0], bracket[1]);
    const double eps = 0.1 * (hi - lo);
    // Too close to an end of the bracket: move away from it, the second time running.
    if (std::min(hi - t, t - lo) < eps) {
      if (insufficient_progress || t >= hi || t <= lo) {
        t = std::abs(t - hi) < std::abs(t - lo) ? hi - eps : lo + eps;
        insufficient_progress = false;
      } else {
        insufficient_progress = true;
      }
    } else {
      insufficient_progress = false;
    }
    std::tie(f_new, g_new) = evaluate_at(closure, x, t, d);
    ++evals;
    gtd_new = dot(g_new, d);
    ++ls_iter;
    if (f_new > f + c1 * t * gtd || f_new >= bracket_f[low]) {
      bracket[high] = t, bracket_f[high] = f_new, bracket_g[high] = g_new, bracket_gtd[high] = gtd_new;
      low = bracket_f[0] <= bracket_f[1] ? 0 : 1;
      high = 1 - low;
    } else {
      if (std::abs(gtd_new) <= -c2 * gtd) {
        done = true;
      } else if (gtd_new * (bracket[high] - bracket[low]) >= 0) {
        bracket[high] = bracket[low], bracket_f[high] = bracket_f[low], bracket_g[high] = bracket_g[low],
        bracket_gtd[high] = bracket_gtd[low];
      }
      bracket[low] = t, bracket_f[low] = f_new, bracket_g[low] = g_new, bracket_gtd[low] = gtd_new;
    }
  }
  return {bracket_f[low], bracket_g[low], bracket[low], evals};
}

Tensor LBFGS::step(const Closure& closure) {
  if (!closure) throw Error("LBFGS.step: expected a closure that computes and returns the loss, got an empty function");
  const Group& group = param_groups().front();
  const double lr = group.lr, tolerance_grad = group.option("tolerance_grad"),
               tolerance_change = group.option("tolerance_change");
  const auto max_iter = std::int64_t(group.option("max_iter")), max_eval = std::int64_t(group.option("max_eval")),
             history_size = std::int64_t(group.option("history_size"));

  Tensor first_loss = closure();
  if (!first_loss.defined() || first_loss.numel() != 1)
    throw ShapeError(fmt::format("LBFGS.step: expected the closure to return the loss, one element, got {}",
                                 first_loss.defined() ? shape_str(first_loss.shape()) : "an undefined tensor"));
  double loss = first_loss.item();
  Tensor grad;
  {
    GradientStore grads = backward(first_loss);
    NoGradGuard no_grad;
    grad = flat_grad(grads);
  }
  NoGradGuard no_grad;
  first_loss = first_loss.detach();
  std::int64_t evals = 1;
  ++func_evals_;
  if (abs_max(grad) <= tolerance_grad) return first_loss;

  for (std::int64_t n = 1; n <= max_iter; ++n) {
    ++n_iter_;
    if (n_iter_ == 1) {
      d_ = neg(grad);
      old_dirs_.clear(), old_steps_.clear(), ro_.clear();
      h_diag_ = 1;
    } else {
      // A new curvature pair (y, s) when it keeps the approximation positive definite.
      Tensor y = sub(grad, prev_flat_grad_), s = mul(d_, t_);
      const double ys = dot(y, s);
      if (ys > 1e-10) {
        if (std::int64_t(old_dirs_.size()) == history_size) {
          old_dirs_.erase(old_dirs_.begin()), old_steps_.erase(old_steps_.begin()), ro_.erase(ro_.begin());
        }
        old_dirs_.push_back(y), old_steps_.push_back(s), ro_.push_back(1.0 / ys);
        h_diag_ = ys / dot(y, y);
      }
      // The two-loop recursion: d = -H grad.
      std::vector<double> al(old_dirs_.size());
      Tensor q = neg(grad);
      for (std::size_t i = old_dirs_.size(); i-- > 0;) {
        al[i] = dot(old_steps_[i], q) * ro_[i];
        q = add(q, old_dirs_[i], -al[i]);
      }
      Tensor r = mul(q, h_diag_);
      for (std::size_t i = 0; i < old_dirs_.size(); ++i) {
        const double be = dot(old_dirs_[i], r) * ro_[i];
        r = add(r, old_steps_[i], al[i] - be);
      }
      d_ = r;
    }
    prev_flat_grad_ = grad.clone();
    prev_loss_ = loss;
    // The first step is scaled down by the gradient's size.
    t_ = n_iter_ == 1 ? std::min(1.0, 1.0 / sum(abs(grad)).item()) * lr : lr;
    const double gtd = dot(grad, d_);
    if (gtd > -tolerance_change) break;  // not a descent direction

    std::int64_t ls_evals = 0;
    bool converged = false;
    if (!options.line_search_fn.empty()) {
      std::vector<Tensor> x;
      for (const Tensor& p : param_groups().front().params) x.push_back(p.detach().clone());
      LineSearch ls;
      {
        EnableGrad grad_on;
        ls = strong_wolfe(closure, x, t_, d_, loss, grad, gtd);
      }
      loss = ls.loss, grad = ls.grad, t_ = ls.t, ls_evals = ls.evals;
      add_to_params(t_, d_);
      converged = abs_max(grad) <= tolerance_grad;
    } else {
      add_to_params(t_, d_);
      if (n != max_iter) {
        EnableGrad grad_on;
        std::tie(loss, grad) = evaluate(closure);
        converged = abs_max(grad) <= tolerance_grad;
        ls_evals = 1;
      }
    }
    evals += ls_evals;
    func_evals_ += ls_evals;
    if (n == max_iter || evals >= max_eval || converged) break;
    if (abs_max(mul(d_, t_)) <= tolerance_change || std::abs(loss - prev_loss_) < tolerance_change) break;
  }
  return first_loss;
}

}  // namespace rumus::optim
