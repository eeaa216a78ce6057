#pragma once
#include <vector>

#include "rumus/ops/optimizer_step.hpp"
#include "rumus/optim/optimizer.hpp"
#include "rumus/core/export.hpp"

RUMUS_API_BEGIN

namespace rumus::optim {

struct AdamOptions {
  double lr = 1e-3;
  double beta1 = 0.9, beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.0;
  bool amsgrad = false;  // divide by the running maximum of exp_avg_sq (not capturable)
};

// torch.optim.Adam: weight decay is L2, added to the gradient.
class Adam : public Optimizer {
 public:
  Adam(std::vector<Tensor> params, AdamOptions options = {}) : Adam(single_group(std::move(params)), options) {}
  Adam(std::vector<ParamGroup> groups, AdamOptions options = {});
  std::string type_name() const override { return "Adam"; }
  AdamOptions options;  // the defaults; each group's values are in param_groups()[g].options

 protected:
  Adam(std::vector<ParamGroup> groups, AdamOptions options, bool decoupled);
  // Queued (AMSGrad's composed update runs at once), and run by
  // finish_updates() through adam_step_foreach_.
  void update(Tensor& param, const Tensor& grad, ParamState& state, const Group& group) override;
  void finish_updates() override;
  std::vector<std::string> buffer_names(const Group& group) const override;
  std::optional<std::array<float, 4>> step_scalars(const ParamState& state, const Group& group) const override;
  Tensor advance_device_scalars(const Tensor& values, const Group& group) const override;

 private:
  bool decoupled_;
  std::vector<AdamUpdate> pending_;  // this step's updates, until finish_updates()
};

struct AdamWOptions {
  double lr = 1e-3;
  double beta1 = 0.9, beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 1e-2;
  bool amsgrad = false;
};

// torch.optim.AdamW: decoupled weight decay, param *= 1 - lr * weight_decay before the Adam step.
class AdamW : public Adam {
 public:
  AdamW(std::vector<Tensor> params, AdamWOptions options = {}) : AdamW(single_group(std::move(params)), options) {}
  AdamW(std::vector<ParamGroup> groups, AdamWOptions o)
      : Adam(std::move(groups), {o.lr, o.beta1, o.beta2, o.eps, o.weight_decay, o.amsgrad}, true) {}
  std::string type_name() const override { return "AdamW"; }
};

}  // namespace rumus::optim

RUMUS_API_END
