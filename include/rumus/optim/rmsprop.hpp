#pragma once
#include "rumus/optim/optimizer.hpp"
#include "rumus/core/export.hpp"

RUMUS_API_BEGIN

namespace rumus::optim {

struct RMSpropOptions {
  double lr = 1e-2;
  double alpha = 0.99;
  double eps = 1e-8;
  double weight_decay = 0.0;
  double momentum = 0.0;
  bool centered = false;
};

// torch.optim.RMSprop (eps added outside the square root).
class RMSprop : public Optimizer {
 public:
  RMSprop(std::vector<Tensor> params, RMSpropOptions options = {}) : RMSprop(single_group(std::move(params)), options) {}
  RMSprop(std::vector<ParamGroup> groups, RMSpropOptions options = {});
  std::string type_name() const override { return "RMSprop"; }
  RMSpropOptions options;  // the defaults; each group's values are in param_groups()[g].options

 protected:
  void update(Tensor& param, const Tensor& grad, ParamState& state, const Group& group) override;
  std::vector<std::string> buffer_names(const Group& group) const override;
};

}  // namespace rumus::optim

RUMUS_API_END
