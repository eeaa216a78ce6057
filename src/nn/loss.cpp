// Loss modules that hold tensors: PyTorch registers class weights as buffers,
// left out when not given (PyTorch's None).
#include "rumus/nn/loss.hpp"

namespace rumus::nn {

BCELoss::BCELoss(Tensor w, Reduction reduction) : weight(std::move(w)), reduction(reduction) {
  if (weight.defined()) weight = register_buffer("weight", weight);
}

BCEWithLogitsLoss::BCEWithLogitsLoss(BCEWithLogitsOptions o) : options(std::move(o)) {
  if (options.weight.defined()) options.weight = register_buffer("weight", options.weight);
  if (options.pos_weight.defined()) options.pos_weight = register_buffer("pos_weight", options.pos_weight);
}

CrossEntropyLoss::CrossEntropyLoss(CrossEntropyOptions o) : options(std::move(o)) {
  if (options.weight.defined()) options.weight = register_buffer("weight", options.weight);
}

NLLLoss::NLLLoss(NLLLossOptions o) : options(std::move(o)) {
  if (options.weight.defined()) options.weight = register_buffer("weight", options.weight);
}

MultiMarginLoss::MultiMarginLoss(MultiMarginLossOptions o) : options(std::move(o)) {
  if (options.weight.defined()) options.weight = register_buffer("weight", options.weight);
}

}  // namespace rumus::nn
