#pragma once
#include "rumus/optim/optimizer.hpp"
#include "rumus/core/export.hpp"

RUMUS_API_BEGIN

namespace rumus::optim {

struct NAdamOptions {
  double lr = 2e-3;
  double beta1 = 0.9, beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.0;  // L2: added to the gradient
  double momentum_decay = 4e-3;
};

// torch.optim.NAdam (Dozat's Nesterov Adam with the momentum schedule
// mu_t = beta1 (1 - 0.96^(t momentum_decay) / 2)). The product of the mu_t,
// which PyTorch keeps as "mu_product", follows from the step count and is
// recomputed, so the state dict holds exp_avg and exp_avg_sq only. As
// PyTorch 2's (and 1.13's foreach path), the next product is mu_product * mu_next.
class NAdam : public Optimizer {
 public:
  NAdam(std::vector<Tensor> params, NAdamOptions options = {}) : NAdam(single_group(std::move(params)), options) {}
  NAdam(std::vector<ParamGroup> groups, NAdamOptions options = {});
  std::string type_name() const override { return "NAdam"; }
  NAdamOptions options;  // the defaults; each group's values are in param_groups()[g].options

 protected:
  void update(Tensor& param, const Tensor& grad, ParamState& state, const Group& group) override;
  std::vector<std::string> buffer_names(const Group&) const override { return {"exp_avg", "exp_avg_sq"}; }
};

}  // namespace rumus::optim

RUMUS_API_END
