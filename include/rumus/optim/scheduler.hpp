#pragma once
// Learning-rate schedules. Each is a closed-form function of the step count,
// applied to every group's initial lr, so a resumed run only needs set_step().
#include <cstdint>
#include <vector>

#include "rumus/optim/optimizer.hpp"
#include "rumus/core/export.hpp"

RUMUS_API_BEGIN

namespace rumus::optim {

class LRScheduler {
 public:
  virtual ~LRScheduler() = default;
  // Advances one step (an epoch or a batch, as the caller chooses) and sets the lr.
  void step() { set_step(step_ + 1); }
  void set_step(std::int64_t step);
  std::int64_t last_step() const { return step_; }
  // The lr this schedule gives a group starting at base_lr, at `step`.
  virtual double lr_at(std::int64_t step, double base_lr) const = 0;

 protected:
  explicit LRScheduler(Optimizer& optimizer) : optimizer_(optimizer) {}
  // Subclasses call this at the end of their constructor: applies step 0.
  void start() { set_step(0); }

 private:
  Optimizer& optimizer_;
  std::int64_t step_ = 0;
};

// lr = base * gamma^floor(step / step_size)
class StepLR : public LRScheduler {
 public:
  StepLR(Optimizer& opt, std::int64_t step_size, double gamma = 0.1);
  double lr_at(std::int64_t step, double base) const override;
  std::int64_t step_size;
  double gamma;
};

// lr = base * gamma^(number of milestones <= step)
class MultiStepLR : public LRScheduler {
 public:
  MultiStepLR(Optimizer& opt, std::vector<std::int64_t> milestones, double gamma = 0.1);
  double lr_at(std::int64_t step, double base) const override;
  std::vector<std::int64_t> milestones;
  double gamma;
};

// lr = eta_min + (base - eta_min) (1 + cos(pi step / t_max)) / 2 (PyTorch's closed form).
class CosineAnnealingLR : public LRScheduler {
 public:
  CosineAnnealingLR(Optimizer& opt, std::int64_t t_max, double eta_min = 0.0);
  double lr_at(std::int64_t step, double base) const override;
  std::int64_t t_max;
  double eta_min;
};

// Linear warm-up from start_factor * base to base over warmup_steps, then
// (optionally) cosine annealing to eta_min at total_steps.
class LinearWarmupLR : public LRScheduler {
 public:
  LinearWarmupLR(Optimizer& opt, std::int64_t warmup_steps, double start_factor = 0.0,
                 std::int64_t cosine_total_steps = 0, double eta_min = 0.0);
  double lr_at(std::int64_t step, double base) const override;
  std::int64_t warmup_steps;
  double start_factor;
  std::int64_t cosine_total_steps;
  double eta_min;
};

// torch.optim.lr_scheduler.OneCycleLR (two phases, cosine annealing): from
// max_lr/div_factor up to max_lr over pct_start of total_steps, then down to
// max_lr/(div_factor*final_div_factor). max_lr replaces the groups' lr.
class OneCycleLR : public LRScheduler {
 public:
  OneCycleLR(Optimizer& opt, double max_lr, std::int64_t total_steps, double pct_start = 0.3,
             double div_factor = 25.0, double final_div_factor = 1e4);
  double lr_at(std::int64_t step, double base) const override;
  double max_lr;
  std::int64_t total_steps;
  double pct_start, div_factor, final_div_factor;
};

}  // namespace rumus::optim

RUMUS_API_END
