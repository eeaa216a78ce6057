#pragma once
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "rumus/optim/optimizer.hpp"
#include "rumus/core/export.hpp"

RUMUS_API_BEGIN

namespace rumus::optim {

struct LBFGSOptions {
  double lr = 1.0;
  std::int64_t max_iter = 20;             // iterations per step
  std::optional<std::int64_t> max_eval;   // closure calls per step; unset: max_iter * 5 / 4
  double tolerance_grad = 1e-7;           // stop when every |gradient| is below it
  double tolerance_change = 1e-9;         // stop when the loss or the step changes less
  std::int64_t history_size = 100;
  std::string line_search_fn;             // "" (a fixed step of lr) or "strong_wolfe"
};

// torch.optim.LBFGS: limited-memory BFGS over all parameters as one vector.
// step(closure) calls the closure, which computes and returns the loss,
// as often as the iterations need (rumus runs backward on the loss), and
// returns the first loss. One parameter group only, as PyTorch's.
class LBFGS : public Optimizer {
 public:
  using Closure = std::function<Tensor()>;
  LBFGS(std::vector<Tensor> params, LBFGSOptions options = {});
  std::string type_name() const override { return "LBFGS"; }
  Tensor step(const Closure& closure);
  using Optimizer::step;  // step(grads) is an error: the iterations need the closure
  LBFGSOptions options;

 protected:
  void update(Tensor& param, const Tensor& grad, ParamState& state, const Group& group) override;
  // The curvature history and the last direction and step, as PyTorch's state.
  void save_extra(StateDict& out) const override;
  void load_extra(const StateDict& state) override;

 private:
  Tensor flat_grad(const GradientStore& grads) const;
  void add_to_params(double t, const Tensor& d);
  void set_params(const std::vector<Tensor>& values);
  // The loss (as a number) and the flat gradient the closure gives.
  std::pair<double, Tensor> evaluate(const Closure& closure);
  std::pair<double, Tensor> evaluate_at(const Closure& closure, const std::vector<Tensor>& x, double t, const Tensor& d);
  struct LineSearch {
    double loss;
    Tensor grad;
    double t;
    std::int64_t evals;
  };
  LineSearch strong_wolfe(const Closure& closure, const std::vector<Tensor>& x, double t, const Tensor& d, double loss,
                          const Tensor& grad, double gtd);

  // The curvature pairs and the state one step leaves for the next.
  Tensor d_, prev_flat_grad_;
  double t_ = 0, h_diag_ = 1, prev_loss_ = 0;
  std::vector<Tensor> old_dirs_, old_steps_;
  std::vector<double> ro_;
  std::int64_t n_iter_ = 0, func_evals_ = 0;
};

}  // namespace rumus::optim

RUMUS_API_END
