#pragma once
#include "rumus/optim/optimizer.hpp"
#include "rumus/core/export.hpp"

RUMUS_API_BEGIN

namespace rumus::optim {

struct RAdamOptions {
  double lr = 1e-3;
  double beta1 = 0.9, beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.0;  // L2: added to the gradient
};

// torch.optim.RAdam: Adam with the variance rectification of Liu et al.;
// while the rectification term is undefined (rho_t <= 5) the step is plain
// momentum SGD with the bias-corrected first moment.
class RAdam : public Optimizer {
 public:
  RAdam(std::vector<Tensor> params, RAdamOptions options = {}) : RAdam(single_group(std::move(params)), options) {}
  RAdam(std::vector<ParamGroup> groups, RAdamOptions options = {});
  std::string type_name() const override { return "RAdam"; }
  RAdamOptions options;  // the defaults; each group's values are in param_groups()[g].options

 protected:
  void update(Tensor& param, const Tensor& grad, ParamState& state, const Group& group) override;
  std::vector<std::string> buffer_names(const Group&) const override { return {"exp_avg", "exp_avg_sq"}; }
};

}  // namespace rumus::optim

RUMUS_API_END
