#pragma once
#include <vector>

#include "rumus/ops/optimizer_step.hpp"
#include "rumus/optim/optimizer.hpp"
#include "rumus/core/export.hpp"

RUMUS_API_BEGIN

namespace rumus::optim {

struct SGDOptions {
  double lr = 0.01;
  double momentum = 0.0;
  double dampening = 0.0;
  double weight_decay = 0.0;  // L2: added to the gradient
  bool nesterov = false;
};

// torch.optim.SGD: the first step seeds the momentum buffer with the gradient.
class SGD : public Optimizer {
 public:
  SGD(std::vector<Tensor> params, SGDOptions options = {}) : SGD(single_group(std::move(params)), options) {}
  SGD(std::vector<ParamGroup> groups, SGDOptions options = {});
  std::string type_name() const override { return "SGD"; }
  SGDOptions options;  // the defaults; each group's values are in param_groups()[g].options

 protected:
  // Queued, and run by finish_updates() through sgd_step_foreach_.
  void update(Tensor& param, const Tensor& grad, ParamState& state, const Group& group) override;
  void finish_updates() override;
  std::vector<std::string> buffer_names(const Group& group) const override;
  std::optional<std::array<float, 4>> step_scalars(const ParamState& state, const Group& group) const override;
  Tensor advance_device_scalars(const Tensor& values, const Group& group) const override;
  std::map<std::string, std::int64_t> replayed_options() const override;

 private:
  std::vector<SgdUpdate> pending_;  // this step's updates, until finish_updates()
};

}  // namespace rumus::optim

RUMUS_API_END
