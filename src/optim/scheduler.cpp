#include "rumus/optim/scheduler.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numbers>

#include "rumus/ops/creation.hpp"

namespace rumus::optim {

namespace {
double cosine(double from, double to, double pct) { return to + (from - to) / 2.0 * (std::cos(std::numbers::pi * pct) + 1.0); }
void check(bool ok, const std::string& what) {
  if (!ok) throw Error(what);
}
}  // namespace

namespace {
Tensor scalar(double v, DType dtype) { return full({}, v, {.dtype = dtype}); }

// state[key] as a number: a one-element tensor, else an Error naming the key.
double entry(const char* op, const StateDict& state, const char* key) {
  auto it = state.find(key);
  if (it == state.end()) throw Error(fmt::format("{}: the state dict has no '{}'", op, key));
  if (it->second.numel() != 1)
    throw ShapeError(fmt::format("{}: expected '{}' to hold one number, got shape {}", op, key,
                                 shape_str(it->second.shape())));
  return it->second.item();
}

std::int64_t count(const char* op, const StateDict& state, const char* key) {
  const double v = entry(op, state, key);
  if (!(v >= 0) || v != std::floor(v)) throw Error(fmt::format("{}: expected '{}' to be a count, got {}", op, key, v));
  return std::int64_t(v);
}
}  // namespace

StateDict LRScheduler::state_dict() const { return {{"last_epoch", scalar(double(step_), DType::i64)}}; }

void LRScheduler::load_state_dict(const StateDict& state) {
  set_step(count("LRScheduler::load_state_dict", state, "last_epoch"));
}

void LRScheduler::set_step(std::int64_t step) {
  check(step >= 0, fmt::format("LRScheduler: expected step >= 0, got {}", step));
  step_ = step;
  auto& groups = optimizer_.param_groups();
  for (std::size_t i = 0; i < groups.size(); ++i) groups[i].lr = lr_at(step, groups[i].initial_lr, i);
  on_step(step);
}

StepLR::StepLR(Optimizer& opt, std::int64_t step_size, double gamma) : LRScheduler(opt), step_size(step_size), gamma(gamma) {
  check(step_size > 0, fmt::format("StepLR: expected step_size >= 1, got {}", step_size));
  start();
}
double StepLR::lr_at(std::int64_t step, double base) const { return base * std::pow(gamma, double(step / step_size)); }

MultiStepLR::MultiStepLR(Optimizer& opt, std::vector<std::int64_t> m, double gamma)
    : LRScheduler(opt), milestones(std::move(m)), gamma(gamma) {
  check(std::is_sorted(milestones.begin(), milestones.end()), "MultiStepLR: expected increasing milestones");
  start();
}
double MultiStepLR::lr_at(std::int64_t step, double base) const {
  auto passed = std::upper_bound(milestones.begin(), milestones.end(), step) - milestones.begin();
  return base * std::pow(gamma, double(passed));
}

CosineAnnealingLR::CosineAnnealingLR(Optimizer& opt, std::int64_t t_max, double eta_min)
    : LRScheduler(opt), t_max(t_max), eta_min(eta_min) {
  check(t_max > 0, fmt::format("CosineAnnealingLR: expected t_max >= 1, got {}", t_max));
  start();
}
double CosineAnnealingLR::lr_at(std::int64_t step, double base) const {
  return cosine(base, eta_min, double(step) / double(t_max));  // periodic past t_max, as PyTorch
}

LinearWarmupLR::LinearWarmupLR(Optimizer& opt, std::int64_t warmup, double start_factor, std::int64_t total,
                               double eta_min)
    : LRScheduler(opt), warmup_steps(warmup), start_factor(start_factor), cosine_total_steps(total), eta_min(eta_min) {
  check(warmup >= 0, fmt::format("LinearWarmupLR: expected warmup_steps >= 0, got {}", warmup));
  check(total == 0 || total > warmup,
        fmt::format("LinearWarmupLR: cosine_total_steps {} must exceed warmup_steps {}", total, warmup));
  start();
}
double LinearWarmupLR::lr_at(std::int64_t step, double base) const {
  if (step < warmup_steps) return base * (start_factor + (1.0 - start_factor) * double(step) / double(warmup_steps));
  if (cosine_total_steps == 0) return base;
  double pct = double(std::min(step, cosine_total_steps) - warmup_steps) / double(cosine_total_steps - warmup_steps);
  return cosine(base, eta_min, pct);
}

ExponentialLR::ExponentialLR(Optimizer& opt, double gamma) : LRScheduler(opt), gamma(gamma) {
  check(gamma > 0, fmt::format("ExponentialLR: expected gamma > 0, got {}", gamma));
  start();
}
double ExponentialLR::lr_at(std::int64_t step, double base) const { return base * std::pow(gamma, double(step)); }

LambdaLR::LambdaLR(Optimizer& opt, Lambda lr_lambda) : LambdaLR(opt, std::vector<Lambda>(opt.param_groups().size(), lr_lambda)) {}

LambdaLR::LambdaLR(Optimizer& opt, std::vector<Lambda> lambdas) : LRScheduler(opt), lr_lambdas(std::move(lambdas)) {
  check(lr_lambdas.size() == opt.param_groups().size(),
        fmt::format("LambdaLR: expected one lr_lambda per parameter group ({}), got {}", opt.param_groups().size(),
                    lr_lambdas.size()));
  for (const Lambda& f : lr_lambdas) check(bool(f), "LambdaLR: expected callable lr_lambdas, got an empty function");
  start();
}
double LambdaLR::lr_at(std::int64_t step, double base, std::size_t group) const {
  return base * lr_lambdas.at(group)(step);
}

namespace {
// One value for every group, or one per group.
std::vector<double> per_group(const char* op, const char* what, std::vector<double> values, std::size_t groups) {
  if (values.size() == 1) values.assign(groups, values.front());
  check(values.size() == groups,
        fmt::format("{}: expected one {} or one per parameter group ({}), got {}", op, what, groups, values.size()));
  return values;
}

// For a schedule that cycles the momentum: the option it cycles ("momentum",
// or Adam's "beta1"), with its bounds made one per group.
std::string cycled_momentum(const char* op, Optimizer& opt, std::vector<double>& base, std::vector<double>& max) {
  const auto& first = opt.param_groups().front().options;
  const std::string key = first.contains("momentum") ? "momentum" : first.contains("beta1") ? "beta1" : "";
  check(!key.empty(), fmt::format("{}: cycle_momentum needs an optimizer with momentum or beta1; {} has neither (pass "
                                  ".cycle_momentum = false)",
                                  op, opt.type_name()));
  const std::size_t groups = opt.param_groups().size();
  base = per_group(op, "base_momentum", std::move(base), groups);
  max = per_group(op, "max_momentum", std::move(max), groups);
  return key;
}
}  // namespace

CyclicLR::CyclicLR(Optimizer& opt, std::vector<double> base_lr, std::vector<double> max_lr, CyclicLROptions o)
    : LRScheduler(opt), options(std::move(o)) {
  const std::size_t groups = opt.param_groups().size();
  base_lrs = per_group("CyclicLR", "base_lr", std::move(base_lr), groups);
  max_lrs = per_group("CyclicLR", "max_lr", std::move(max_lr), groups);
  const std::int64_t down = options.step_size_down.value_or(options.step_size_up);
  check(options.step_size_up >= 1 && down >= 1,
        fmt::format("CyclicLR: expected step_size_up and step_size_down >= 1, got {} and {}", options.step_size_up,
                    down));
  if (!options.scale_fn)
    check(options.mode == "triangular" || options.mode == "triangular2" || options.mode == "exp_range",
          fmt::format("CyclicLR: expected mode 'triangular', 'triangular2' or 'exp_range', got '{}'", options.mode));
  check(options.scale_mode == "cycle" || options.scale_mode == "iterations",
        fmt::format("CyclicLR: expected scale_mode 'cycle' or 'iterations', got '{}'", options.scale_mode));
  if (options.cycle_momentum)
    momentum_key_ = cycled_momentum("CyclicLR", opt, options.base_momentum, options.max_momentum);
  start();
}

std::pair<double, double> CyclicLR::phase(std::int64_t step) const {
  const double up = double(options.step_size_up), total = up + double(options.step_size_down.value_or(options.step_size_up));
  const double ratio = up / total, s = double(step);
  const double cycle = std::floor(1.0 + s / total), x = 1.0 + s / total - cycle;
  const double height = x <= ratio ? x / ratio : (x - 1.0) / (ratio - 1.0);
  double scale;
  if (options.scale_fn) scale = options.scale_fn(options.scale_mode == "cycle" ? cycle : s);
  else if (options.mode == "triangular") scale = 1.0;
  else if (options.mode == "triangular2") scale = 1.0 / std::pow(2.0, cycle - 1.0);
  else scale = std::pow(options.gamma, s);  // exp_range scales by iterations
  return {height, scale};
}

double CyclicLR::lr_at(std::int64_t step, double, std::size_t group) const {
  auto [height, scale] = phase(step);
  return base_lrs.at(group) + (max_lrs.at(group) - base_lrs.at(group)) * height * scale;
}

void CyclicLR::on_step(std::int64_t step) {
  if (!options.cycle_momentum) return;
  auto [height, scale] = phase(step);
  auto& groups = optimizer().param_groups();
  for (std::size_t i = 0; i < groups.size(); ++i) {
    const double hi = options.max_momentum[i], lo = options.base_momentum[i];
    groups[i].options[momentum_key_] = hi - (hi - lo) * height * scale;
  }
}

OneCycleLR::OneCycleLR(Optimizer& opt, double max_lr, std::int64_t total, OneCycleLROptions o)
    : LRScheduler(opt), max_lr(max_lr), total_steps(total), options(std::move(o)) {
  check(total >= 2, fmt::format("OneCycleLR: expected total_steps >= 2, got {}", total));
  check(options.pct_start > 0 && options.pct_start < 1,
        fmt::format("OneCycleLR: expected 0 < pct_start < 1, got {}", options.pct_start));
  check(max_lr > 0 && options.div_factor > 0 && options.final_div_factor > 0,
        "OneCycleLR: expected positive max_lr, div_factor, final_div_factor");
  check(options.anneal_strategy == "cos" || options.anneal_strategy == "linear",
        fmt::format("OneCycleLR: expected anneal_strategy 'cos' or 'linear', got '{}'", options.anneal_strategy));
  for (auto& g : opt.param_groups()) g.initial_lr = max_lr;
  if (options.cycle_momentum)
    momentum_key_ = cycled_momentum("OneCycleLR", opt, options.base_momentum, options.max_momentum);
  start();
}

double OneCycleLR::anneal(double start, double end, double pct) const {
  return options.anneal_strategy == "cos" ? cosine(start, end, pct) : start + (end - start) * pct;
}

// PyTorch's phases end at these steps: pct_start * total - 1 (the peak), then
// (three_phase) 2 * pct_start * total - 2, and total - 1. A step past the
// last stays at the last step's values.
std::pair<std::size_t, double> OneCycleLR::phase(std::int64_t step) const {
  const double peak = options.pct_start * double(total_steps) - 1.0, last = double(total_steps) - 1.0;
  std::vector<double> ends{peak};
  if (options.three_phase) ends.push_back(2.0 * options.pct_start * double(total_steps) - 2.0);
  ends.push_back(last);
  const double s = std::min(double(step), last);
  double begin = 0.0;
  for (std::size_t i = 0; i < ends.size(); ++i) {
    if (s <= ends[i] || i + 1 == ends.size()) return {i, ends[i] > begin ? (s - begin) / (ends[i] - begin) : 1.0};
    begin = ends[i];
  }
  return {ends.size() - 1, 1.0};
}

double OneCycleLR::lr_at(std::int64_t step, double max) const {
  const double initial = max / options.div_factor, min = initial / options.final_div_factor;
  const auto [i, pct] = phase(step);
  if (i == 0) return anneal(initial, max, pct);
  if (options.three_phase && i == 1) return anneal(max, initial, pct);
  return anneal(options.three_phase ? initial : max, min, pct);
}

void OneCycleLR::on_step(std::int64_t step) {
  if (!options.cycle_momentum) return;
  const auto [i, pct] = phase(step);
  auto& groups = optimizer().param_groups();
  for (std::size_t g = 0; g < groups.size(); ++g) {
    const double hi = options.max_momentum[g], lo = options.base_momentum[g];
    // Down while the lr rises, up while it falls; the third phase holds the maximum.
    const double m = i == 0 ? anneal(hi, lo, pct) : (options.three_phase && i == 2) ? hi : anneal(lo, hi, pct);
    groups[g].options[momentum_key_] = m;
  }
}

ReduceLROnPlateau::ReduceLROnPlateau(Optimizer& opt, ReduceLROnPlateauOptions o) : options(std::move(o)), optimizer_(opt) {
  check(options.factor < 1.0, fmt::format("ReduceLROnPlateau: expected factor < 1, got {}", options.factor));
  check(options.mode == "min" || options.mode == "max",
        fmt::format("ReduceLROnPlateau: expected mode 'min' or 'max', got '{}'", options.mode));
  check(options.threshold_mode == "rel" || options.threshold_mode == "abs",
        fmt::format("ReduceLROnPlateau: expected threshold_mode 'rel' or 'abs', got '{}'", options.threshold_mode));
  check(options.patience >= 0 && options.cooldown >= 0,
        fmt::format("ReduceLROnPlateau: expected patience and cooldown >= 0, got {} and {}", options.patience,
                    options.cooldown));
  options.min_lr = per_group("ReduceLROnPlateau", "min_lr", options.min_lr, opt.param_groups().size());
  best_ = options.mode == "min" ? std::numeric_limits<double>::infinity() : -std::numeric_limits<double>::infinity();
}

StateDict ReduceLROnPlateau::state_dict() const {
  return {{"best", scalar(best_, DType::f64)},
          {"num_bad_epochs", scalar(double(num_bad_epochs_), DType::i64)},
          {"cooldown_counter", scalar(double(cooldown_counter_), DType::i64)},
          {"last_epoch", scalar(double(last_step_), DType::i64)}};
}

void ReduceLROnPlateau::load_state_dict(const StateDict& state) {
  const char* op = "ReduceLROnPlateau::load_state_dict";
  // Everything is read before anything changes.
  const double best = entry(op, state, "best");
  const std::int64_t bad = count(op, state, "num_bad_epochs"), cooldown = count(op, state, "cooldown_counter"),
                     last = count(op, state, "last_epoch");
  best_ = best;
  num_bad_epochs_ = bad;
  cooldown_counter_ = cooldown;
  last_step_ = last;
}

bool ReduceLROnPlateau::is_better(double a) const {
  const bool rel = options.threshold_mode == "rel";
  if (options.mode == "min") return a < (rel ? best_ * (1.0 - options.threshold) : best_ - options.threshold);
  return a > (rel ? best_ * (1.0 + options.threshold) : best_ + options.threshold);
}

void ReduceLROnPlateau::step(double metric) {
  ++last_step_;
  if (is_better(metric)) {
    best_ = metric;
    num_bad_epochs_ = 0;
  } else {
    ++num_bad_epochs_;
  }
  if (cooldown_counter_ > 0) {  // improvements are not awaited while cooling down
    --cooldown_counter_;
    num_bad_epochs_ = 0;
  }
  if (num_bad_epochs_ > options.patience) {
    auto& groups = optimizer_.param_groups();
    for (std::size_t i = 0; i < groups.size(); ++i) {
      const double reduced = std::max(groups[i].lr * options.factor, options.min_lr[i]);
      if (groups[i].lr - reduced > options.eps) groups[i].lr = reduced;
    }
    cooldown_counter_ = options.cooldown;
    num_bad_epochs_ = 0;
  }
}

}  // namespace rumus::optim
