#pragma once
// Learning-rate schedules. Each is a closed-form function of the step count,
// applied to every group's initial lr, so a resumed run only needs set_step().
#include <cstdint>
#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "rumus/core/state_dict.hpp"
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
  // PyTorch's key: {"last_epoch": the step count}. The schedule's settings
  // are its constructor's; loading sets the step (and so the lrs) again.
  StateDict state_dict() const;
  void load_state_dict(const StateDict& state);
  // The lr this schedule gives a group starting at base_lr, at `step`.
  virtual double lr_at(std::int64_t step, double base_lr) const = 0;
  // The same for group `group` (schedules with per-group settings override it).
  virtual double lr_at(std::int64_t step, double base_lr, std::size_t group) const {
    (void)group;
    return lr_at(step, base_lr);
  }

 protected:
  explicit LRScheduler(Optimizer& optimizer) : optimizer_(optimizer) {}
  // Subclasses call this at the end of their constructor: applies step 0.
  void start() { set_step(0); }
  // Called by set_step after the lrs are set: schedules of other
  // hyperparameters (CyclicLR's momentum) set them here.
  virtual void on_step(std::int64_t step) { (void)step; }
  Optimizer& optimizer() const { return optimizer_; }

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

struct OneCycleLROptions {
  double pct_start = 0.3;               // the share of the steps spent rising
  std::string anneal_strategy = "cos";  // "cos" or "linear"
  // Cycles the groups' "momentum" (or Adam's "beta1") inversely to the lr,
  // from max_momentum down to base_momentum while the lr rises, and back.
  bool cycle_momentum = true;
  std::vector<double> base_momentum{0.85}, max_momentum{0.95};  // one value, or one per group
  double div_factor = 25.0;        // the first lr is max_lr / div_factor
  double final_div_factor = 1e4;   // the last is that over final_div_factor
  bool three_phase = false;        // down to the first lr again before the final annealing
};

// torch.optim.lr_scheduler.OneCycleLR: from max_lr/div_factor up to max_lr
// over pct_start of total_steps, then down to max_lr/(div_factor *
// final_div_factor) (three_phase: back to the first lr over as many steps,
// then down). max_lr replaces the groups' lr.
class OneCycleLR : public LRScheduler {
 public:
  OneCycleLR(Optimizer& opt, double max_lr, std::int64_t total_steps, OneCycleLROptions options = {});
  double lr_at(std::int64_t step, double base) const override;
  double max_lr;
  std::int64_t total_steps;
  OneCycleLROptions options;

 protected:
  void on_step(std::int64_t step) override;

 private:
  // The phase `step` falls in, and how far along it (in [0, 1]).
  std::pair<std::size_t, double> phase(std::int64_t step) const;
  double anneal(double start, double end, double pct) const;
  std::string momentum_key_;
};

// lr = base * gamma^step (torch.optim.lr_scheduler.ExponentialLR).
class ExponentialLR : public LRScheduler {
 public:
  ExponentialLR(Optimizer& opt, double gamma);
  double lr_at(std::int64_t step, double base) const override;
  double gamma;
};

// lr = base * lr_lambda(step): one function for every group, or one per group
// (torch.optim.lr_scheduler.LambdaLR).
class LambdaLR : public LRScheduler {
 public:
  using Lambda = std::function<double(std::int64_t)>;
  LambdaLR(Optimizer& opt, Lambda lr_lambda);
  LambdaLR(Optimizer& opt, std::vector<Lambda> lr_lambdas);
  double lr_at(std::int64_t step, double base) const override { return lr_at(step, base, 0); }
  double lr_at(std::int64_t step, double base, std::size_t group) const override;
  std::vector<Lambda> lr_lambdas;
};

struct CyclicLROptions {
  std::int64_t step_size_up = 2000;
  std::optional<std::int64_t> step_size_down;  // unset: step_size_up
  std::string mode = "triangular";              // "triangular", "triangular2" or "exp_range"
  double gamma = 1.0;                           // exp_range: the amplitude scales by gamma^step
  // A custom amplitude scale instead of mode's, of the cycle number
  // (scale_mode "cycle") or of the step ("iterations").
  std::function<double(double)> scale_fn;
  std::string scale_mode = "cycle";
  // Cycles the groups' "momentum" (or Adam's "beta1") inversely to the lr, between these.
  bool cycle_momentum = true;
  std::vector<double> base_momentum{0.8}, max_momentum{0.9};  // one value, or one per group
};

// torch.optim.lr_scheduler.CyclicLR (Smith's cyclical learning rates): the lr
// goes from base_lr to max_lr over step_size_up steps and back over
// step_size_down. base_lr and max_lr (one value, or one per group) replace the groups' lr.
class CyclicLR : public LRScheduler {
 public:
  CyclicLR(Optimizer& opt, std::vector<double> base_lr, std::vector<double> max_lr, CyclicLROptions options = {});
  CyclicLR(Optimizer& opt, double base_lr, double max_lr, CyclicLROptions options = {})
      : CyclicLR(opt, std::vector<double>{base_lr}, std::vector<double>{max_lr}, std::move(options)) {}
  double lr_at(std::int64_t step, double base) const override { return lr_at(step, base, 0); }
  double lr_at(std::int64_t step, double base, std::size_t group) const override;
  std::vector<double> base_lrs, max_lrs;
  CyclicLROptions options;

 protected:
  void on_step(std::int64_t step) override;

 private:
  // The position in the cycle in [0, 1] (0 at base, 1 at max) and the amplitude scale.
  std::pair<double, double> phase(std::int64_t step) const;
  std::string momentum_key_;
};

struct ReduceLROnPlateauOptions {
  std::string mode = "min";            // "min": lower is better; "max": higher is better
  double factor = 0.1;                 // new lr = lr * factor
  std::int64_t patience = 10;          // steps without improvement tolerated
  double threshold = 1e-4;
  std::string threshold_mode = "rel";  // "rel": best * (1 -/+ threshold); "abs": best -/+ threshold
  std::int64_t cooldown = 0;           // steps after a reduction before counting again
  std::vector<double> min_lr{0.0};     // one value, or one per group
  double eps = 1e-8;                   // smaller changes of lr are skipped
};

// torch.optim.lr_scheduler.ReduceLROnPlateau: lowers every group's lr when a
// metric (a validation loss) has stopped improving; step(metric) once per epoch.
class ReduceLROnPlateau {
 public:
  ReduceLROnPlateau(Optimizer& opt, ReduceLROnPlateauOptions options = {});
  void step(double metric);
  std::int64_t last_step() const { return last_step_; }
  double best() const { return best_; }
  std::int64_t num_bad_epochs() const { return num_bad_epochs_; }
  // What a resumed run needs to reduce where the uninterrupted one would, under
  // PyTorch's keys: best, num_bad_epochs, cooldown_counter, last_epoch. The
  // lrs themselves are the optimizer's (its state dict).
  StateDict state_dict() const;
  void load_state_dict(const StateDict& state);
  ReduceLROnPlateauOptions options;

 private:
  bool is_better(double metric) const;
  Optimizer& optimizer_;
  double best_;
  std::int64_t num_bad_epochs_ = 0, cooldown_counter_ = 0, last_step_ = 0;
};

}  // namespace rumus::optim

RUMUS_API_END
