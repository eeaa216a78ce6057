#include "rumus/optim/scheduler.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numbers>

namespace rumus::optim {

namespace {
double cosine(double from, double to, double pct) { return to + (from - to) / 2.0 * (std::cos(std::numbers::pi * pct) + 1.0); }
void check(bool ok, const std::string& what) {
  if (!ok) throw Error(what);
}
}  // namespace

void LRScheduler::set_step(std::int64_t step) {
  check(step >= 0, fmt::format("LRScheduler: expected step >= 0, got {}", step));
  step_ = step;
  for (auto& g : optimizer_.param_groups()) g.lr = lr_at(step, g.initial_lr);
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

OneCycleLR::OneCycleLR(Optimizer& opt, double max_lr, std::int64_t total, double pct_start, double div,
                       double final_div)
    : LRScheduler(opt), max_lr(max_lr), total_steps(total), pct_start(pct_start), div_factor(div),
      final_div_factor(final_div) {
  check(total >= 2, fmt::format("OneCycleLR: expected total_steps >= 2, got {}", total));
  check(pct_start > 0 && pct_start < 1, fmt::format("OneCycleLR: expected 0 < pct_start < 1, got {}", pct_start));
  check(max_lr > 0 && div > 0 && final_div > 0, "OneCycleLR: expected positive max_lr, div_factor, final_div_factor");
  for (auto& g : opt.param_groups()) g.initial_lr = max_lr;
  start();
}
double OneCycleLR::lr_at(std::int64_t step, double max) const {
  const double initial = max / div_factor, min = initial / final_div_factor;
  const double up_end = std::max(pct_start * double(total_steps) - 1.0, 0.0), down_end = double(total_steps) - 1.0;
  const double s = double(std::min(step, total_steps - 1));
  if (s < up_end) return cosine(initial, max, s / up_end);
  if (up_end >= down_end) return max;
  return cosine(max, min, (s - up_end) / (down_end - up_end));
}

}  // namespace rumus::optim
