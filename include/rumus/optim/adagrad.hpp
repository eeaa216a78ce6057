#pragma once
#include "rumus/optim/optimizer.hpp"
#include "rumus/core/export.hpp"

RUMUS_API_BEGIN

namespace rumus::optim {

struct AdagradOptions {
  double lr = 1e-2;
  double lr_decay = 0.0;  // lr / (1 + (step - 1) lr_decay)
  double weight_decay = 0.0;  // L2: added to the gradient
  double initial_accumulator_value = 0.0;
  double eps = 1e-10;
};

// torch.optim.Adagrad: the sum of squared gradients divides each step.
class Adagrad : public Optimizer {
 public:
  Adagrad(std::vector<Tensor> params, AdagradOptions options = {}) : Adagrad(single_group(std::move(params)), options) {}
  Adagrad(std::vector<ParamGroup> groups, AdagradOptions options = {});
  std::string type_name() const override { return "Adagrad"; }
  AdagradOptions options;  // the defaults; each group's values are in param_groups()[g].options

 protected:
  void update(Tensor& param, const Tensor& grad, ParamState& state, const Group& group) override;
  std::vector<std::string> buffer_names(const Group&) const override { return {"sum"}; }
};

}  // namespace rumus::optim

RUMUS_API_END
